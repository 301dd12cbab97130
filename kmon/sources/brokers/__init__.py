"""The cluster as its brokers tell it: AdminClient metadata, kmon's own Metadata request,
broker names resolved, and why a bootstrap did not answer."""
