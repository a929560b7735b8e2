"""The one error type the CLI turns into a single line: what is wrong and how to fix it."""


class MallocbenchError(Exception):
    """A problem the user can fix; the message names it and says how."""
