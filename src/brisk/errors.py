"""One exception type for mistakes the user can fix: bad config, missing or corrupt data."""


class BriskError(Exception):
    """A problem the user can fix. The entry points print the message alone, with no traceback."""
