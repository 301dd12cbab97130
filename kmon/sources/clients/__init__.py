"""librdkafka clients' own statistics, left in kmon's spool by the agent."""
