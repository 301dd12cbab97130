"""A JVM client's own view: JMX metrics and its log."""
