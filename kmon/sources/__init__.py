"""Sources: each reads one kind of evidence and knows nothing of the others."""
