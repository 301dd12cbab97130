"""Packets: the capture socket and its kernel filter, and the Kafka frames read from it."""
