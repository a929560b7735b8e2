"""What an experiment may put into a server's my.cnf and environment, checked in one place.

Experiment files are shared and copied; a value that smuggles a second line into my.cnf
(`init_file=...` runs SQL as root at startup) or an `LD_AUDIT` knob would make the server
run code nobody reviewed, while the report still names an allocator. So a config value is
one line of plain text, a knob is an ordinary environment variable, and neither may touch
what mallocbench sets itself to keep each server private.
"""

from __future__ import annotations

import re

from mallocbench.errors import MallocbenchError

# The longest mariadbd option (plugins included) has 60 characters; 64 leaves a margin and
# still refuses junk. `.` appears in structured options (hot_cache.key_buffer_size).
CONFIG_NAME_MAX = 64
_CONFIG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")

# Prefixes my_getopt strips before it looks an option up, so `loose-init-file` and
# `skip-networking` are spellings of init_file and networking.
OPTION_PREFIXES = ("loose_", "skip_", "enable_", "disable_", "maximum_", "autoset_")

# What mallocbench writes into every private server's my.cnf: overriding one would share
# a datadir, socket or port with another server, open it to the network, let any account
# in, or run a file of SQL at startup.
OWNED_CONFIG = (
    "basedir",
    "bind_address",
    "datadir",
    # skip-grant-tables: every account, with any password or none, would get in.
    "grant_tables",
    "init_file",
    "log_error",
    "networking",
    "pid_file",
    "plugin_dir",
    "port",
    "secure_file_priv",
    "socket",
    "tmpdir",
    "user",
)

# In an option file `#` starts a comment anywhere outside quotes, so the server would
# silently drop the rest of the value; and a backslash starts an escape (`\n` becomes a
# line break in the value). `;` is left alone: it only starts a comment at the beginning
# of a line, which a value never is, and innodb_data_file_path needs it as a separator.
_CONFIG_FORBIDDEN = {
    "#": ("a '#'", "my.cnf would cut the value there"),
    "\\": ("a backslash", "my.cnf reads it as an escape (\\n becomes a line break)"),
}

_KNOB_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Environment variables that make the server or the driver load code from elsewhere:
# iconv modules (GCONV_PATH) and OpenSSL configuration, providers and engines (mariadbd
# links libssl). LD_* is refused as a whole: every one of them belongs to the loader.
_CODE_LOADING_ENV = {
    "GCONV_PATH": "glibc's iconv loads its conversion modules from there",
    "OPENSSL_CONF": "an OpenSSL configuration can load providers and engines",
    "OPENSSL_ENGINES": "OpenSSL loads engine libraries from there",
    "OPENSSL_MODULES": "OpenSSL loads provider libraries from there",
}


def option_key(name: str) -> str:
    """A config key as mariadbd compares names: case and `-` or `_` do not matter."""
    return name.lower().replace("-", "_")


def _normalise(name: str) -> str:
    """The option a name addresses, as mariadbd resolves it (case, - or _, prefixes)."""
    key = option_key(name)
    for prefix in OPTION_PREFIXES:
        if key.startswith(prefix):
            key = key.removeprefix(prefix)
    return key


def _line_problem(value: str) -> str | None:
    """Why `value` is not one line of plain text, or None."""
    if "\n" in value or "\r" in value:
        return "a line break"
    if "\0" in value:
        return "a NUL character"
    control = next((c for c in value if (ord(c) < 32 and c != "\t") or ord(c) == 127), None)
    if control is not None:
        return f"a control character (U+{ord(control):04X})"
    return None


def check_config(name: str, value: str, where: str) -> None:
    """Refuse a my.cnf [mysqld] override that is not one plain `name=value` line of its own.

    `where` names the table it came from, e.g. "setup je" or "[server]".
    """
    option = _normalise(name)
    if not _CONFIG_NAME.fullmatch(name) or not option:
        raise MallocbenchError(
            f"{where}: config key {name!r} is not a server option name: use letters, digits, "
            "'_', '-' and '.', starting with a letter"
        )
    if len(option) > CONFIG_NAME_MAX:
        raise MallocbenchError(
            f"{where}: config key {name} is longer than any server option "
            f"({CONFIG_NAME_MAX} characters at most): check its spelling"
        )
    # mariadbd also accepts any unambiguous abbreviation (init-fil means init-file), so a
    # name that begins an owned option is as good as the option itself.
    owned = next((o for o in OWNED_CONFIG if o.startswith(option)), None)
    if owned is not None:
        raise MallocbenchError(
            f"{where}: config key {name} "
            + (f"(short for {owned}) " if owned != option else "")
            + "is set by mallocbench for every private server and cannot be overridden"
        )
    problem = _line_problem(value)
    if problem is not None:
        raise MallocbenchError(
            f"{where}: config key {name} has {problem} in its value: give one value on one line"
        )
    for char, (what, why) in _CONFIG_FORBIDDEN.items():
        if char in value:
            # Control characters are refused above, so the value prints as it is.
            raise MallocbenchError(
                f"{where}: config key {name} has {what} in its value '{value}': {why}; "
                "give the value without it"
            )


def check_knob(name: str, value: str, where: str) -> None:
    """Refuse an allocator knob that is not a plain environment variable of one line, or
    that would make the process load other code than the allocator the setup names."""
    if not _KNOB_NAME.fullmatch(name):
        raise MallocbenchError(
            f"{where}: knob {name!r} is not an environment variable name: use letters, "
            "digits and '_', not starting with a digit"
        )
    upper = name.upper()
    if upper == "LD_PRELOAD":
        raise MallocbenchError(
            f"{where}: knob LD_PRELOAD is set by mallocbench from the setup's allocator: "
            'use allocator = "jemalloc" (a name) or allocator = "/path/to/libmalloc.so"'
        )
    if upper.startswith("LD_"):
        raise MallocbenchError(
            f"{where}: knob {name} belongs to the dynamic loader and would load or bind other "
            "code than the allocator being measured: remove it"
        )
    if upper in _CODE_LOADING_ENV:
        raise MallocbenchError(
            f"{where}: knob {name} would make the process load other code "
            f"({_CODE_LOADING_ENV[upper]}): remove it"
        )
    problem = _line_problem(value)
    if problem is not None:
        raise MallocbenchError(
            f"{where}: knob {name} has {problem} in its value: give one value on one line"
        )
