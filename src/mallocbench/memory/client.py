"""What the mysql client would connect with: the options given, and the option files it
reads, read its way. The password found is never printed, logged or put in an error
message (ConnectOptions keeps it out of its repr)."""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mallocbench.errors import MallocbenchError

# The groups the mariadb/mysql client reads, plus one of our own.
CLIENT_GROUPS = (
    "client",
    "client-server",
    "client-mariadb",
    "mysql",
    "mariadb-client",
    "mallocbench",
)
SYSTEM_OPTION_FILES = ("/etc/my.cnf", "/etc/mysql/my.cnf")
DEBIAN_CNF = "/etc/mysql/debian.cnf"
USUAL_SOCKETS = (
    "/run/mysqld/mysqld.sock",
    "/var/run/mysqld/mysqld.sock",
    "/tmp/mysql.sock",
    "/var/lib/mysql/mysql.sock",
)
# For tests only: the system paths above are looked up under this directory instead of
# /, so a test decides what the machine offers and an installed server cannot answer it.
TEST_ROOT_ENV = "MALLOCBENCH_TEST_SYSTEM_ROOT"
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "")
_MAX_INCLUDE_DEPTH = 10


@dataclass
class ConnectOptions:
    socket: str | None = None
    host: str | None = None
    port: int | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    defaults_file: str | None = None

    @property
    def where(self) -> str:
        if self.socket:
            return f"socket {self.socket}"
        return f"{self.host or 'localhost'}:{self.port or 3306}"

    @property
    def target(self) -> str:
        """The socket path or host:port, as a person would type it."""
        return self.socket or f"{self.host or 'localhost'}:{self.port or 3306}"

    @property
    def is_local(self) -> bool:
        return bool(self.socket) or (self.host or "localhost") in _LOCAL_HOSTS


def os_user() -> str:
    """The login name the client uses when no user is given (unix_socket checks the same)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return os.environ.get("USER") or "root"


# --- option files, read the way the mysql client reads them -----------------------------


@dataclass
class OptionFiles:
    """What the client groups of some option files say, and which file said each value."""

    values: dict[str, str] = field(default_factory=dict, repr=False)
    origin: dict[str, str] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def get(self, key: str) -> str | None:
        return self.values.get(key)


_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "r": "\r", "s": " ", "\\": "\\"}


def _option_value(raw: str) -> str:
    """A value as the client reads it: a # comment outside quotes cut off, enclosing
    quotes removed, then the \\b \\t \\n \\r \\s \\\\ escapes applied."""
    quote: str | None = None
    escaped = False
    end = len(raw)
    for i, ch in enumerate(raw):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in "'\"":
            quote = None if quote == ch else (quote or ch)
        elif ch == "#" and quote is None:
            end = i
            break
    value = raw[:end].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[0]), value)


def read_option_files(
    paths: Iterable[str | Path], groups: tuple[str, ...] = CLIENT_GROUPS
) -> OptionFiles:
    """The client options of `paths` in order, a later value winning over an earlier one.

    Tolerant as the client is: keys without values, `!include` and `!includedir`
    (its *.cnf files in name order), `loose-` prefixes, `-` or `_` in names. Missing
    files are skipped; unreadable ones are listed in `unreadable`.
    """
    out = OptionFiles()
    for path in paths:
        _read_one(Path(path).expanduser(), groups, out, frozenset(), 0)
    return out


def _read_one(
    path: Path, groups: tuple[str, ...], out: OptionFiles, chain: frozenset[Path], depth: int
) -> None:
    real = path.resolve()
    if real in chain or depth > _MAX_INCLUDE_DEPTH:
        return  # an include cycle: the client refuses it too
    try:
        text = path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return
    except OSError:
        out.unreadable.append(str(path))
        return
    out.read.append(str(path))
    chain = chain | {real}
    group: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("!"):
            for included in _included(line, path):
                _read_one(included, groups, out, chain, depth + 1)
        elif line.startswith("["):
            group = line[1:].split("]", 1)[0].strip().lower()
        elif group in groups:
            key, sep, value = line.partition("=")
            key = key.split("#", 1)[0].strip().lower().replace("-", "_").removeprefix("loose_")
            # A key without a value is a flag (a bare `password` means "prompt"): no value.
            if sep and key:
                out.values[key] = _option_value(value)
                out.origin[key] = str(path)


def _included(line: str, path: Path) -> list[Path]:
    parts = line[1:].split(None, 1)
    if len(parts) < 2:
        return []
    name, target = parts[0].lower(), Path(parts[1].strip())
    if not target.is_absolute():
        target = path.parent / target
    if name == "include":
        return [target]
    if name == "includedir":
        try:
            return sorted(p for p in target.iterdir() if p.suffix == ".cnf" and p.is_file())
        except OSError:
            return []
    return []


def system_path(path: str) -> Path:
    root = os.environ.get(TEST_ROOT_ENV)
    return Path(root + path) if root else Path(path)


def default_option_files() -> list[Path]:
    """The files the client reads when not given --defaults-file, in its order."""
    return [*(system_path(p) for p in SYSTEM_OPTION_FILES), Path("~/.my.cnf").expanduser()]


def _explicit_option_file(path: str) -> OptionFiles:
    file = Path(path).expanduser()
    if not file.is_file():
        raise MallocbenchError(
            f"option file {path} does not exist: give --defaults-file an existing file"
        )
    options = read_option_files([file])
    if options.unreadable:
        raise MallocbenchError(
            f"cannot read option file {path}: permission denied (run as its owner)"
        )
    return options


def option_files_for(opts: ConnectOptions) -> OptionFiles:
    """--defaults-file replaces the default files, as it does for the client."""
    if opts.defaults_file:
        return _explicit_option_file(opts.defaults_file)
    return read_option_files(default_option_files())


def read_option_file(path: str | None) -> dict[str, str]:
    """The client options of one option file, or of the client's default files."""
    if path is not None:
        return _explicit_option_file(path).values
    return read_option_files(default_option_files()).values


def short_reason(exc: BaseException) -> str:
    """A client error in a few words: the message without its code, common causes named."""
    text = str(exc.args[1] if len(exc.args) > 1 else exc)
    text = re.sub(r"\s+", " ", text).strip()
    if "Connection refused" in text:
        return "connection refused (no server listening there)"
    if "timed out" in text:
        return "connection timed out"
    return text[:160]
