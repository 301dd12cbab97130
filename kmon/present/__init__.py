"""Presentation without Textual: the column vocabulary, plain text, the dashboard's bounded
memory, number and state formats and the dashboard's settings, shared by the text output and
the screens."""
