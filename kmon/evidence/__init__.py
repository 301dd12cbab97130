"""Evidence: what each source says about a socket, as claims; one resolve() makes the row."""
