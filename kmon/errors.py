"""The error every command raises for a problem the user can fix."""


class UserError(Exception):
    """Printed by the CLI as one line on stderr, exit code 1; never a traceback."""
