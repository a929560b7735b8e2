"""The systemd form: a drop-in's Environment= lines, quoted as systemd reads them, written
and removed; and the environment a unit's files already give the server.
"""

from __future__ import annotations

import re
from pathlib import Path

from mallocbench.deploy.deployment import (
    ENV_NAME,
    OLD_RECORD_DROPIN,
    RECORD_DROPIN,
    SYSTEMD_DIR,
    SYSTEMD_PLAIN,
    Deployment,
    Snippet,
    check_assignment,
    comment,
    service_name,
    what_it_runs,
)
from mallocbench.errors import MallocbenchError
from mallocbench.files import read_bounded, write_text_atomic


def environment_line(name: str, value: str) -> str:
    """`Environment=NAME=VALUE` as systemd reads it back exactly (quoted when needed)."""
    check_assignment(name, value)
    # Specifiers are expanded inside quotes too, so a literal % is always doubled.
    word = f"{name}={value}".replace("%", "%%")
    if SYSTEMD_PLAIN.fullmatch(word):
        return f"Environment={word}"
    return 'Environment="' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_snippet(d: Deployment) -> Snippet:
    path = f"{SYSTEMD_DIR}/{d.dropin_relpath}"
    lines = [
        f"# mallocbench: {comment(what_it_runs(d))}",
        f"# Install as {path}, then:",
        f"#   systemctl daemon-reload && systemctl restart {d.service}",
        "# A drop-in sorting later by name (e.g. override.conf) wins for the same variable;",
        f"# `systemctl cat {d.service}` lists them all.",
    ]
    if d.shim is not None:
        lines += [
            "# A tuned mallocbench-*.conf sorts later and wins: remove that one to record.",
            f"# Remove this one when done: mallocbench record --remove-dropin --service "
            f"{d.service}",
        ]
    elif d.package:
        lines.append(f"# The library comes from the Debian package {d.package}.")
    elif d.preload:
        lines.append("# A custom library: it must exist at this path on the server's host.")
    else:
        lines.append("# glibc's malloc needs no preload: any inherited one is removed.")
    lines.append("[Service]")
    lines += [environment_line(k, v) for k, v in d.environment.items()]
    if d.preload is None and d.shim is None:
        lines.append("UnsetEnvironment=LD_PRELOAD")
    if d.setup.cpus:
        lines.append(f"# The setup ran on CPUs {comment(d.setup.cpus)}; to pin here too:")
        lines.append(f"# CPUAffinity={comment(d.setup.cpus)}")
    if d.setup.memory_limit_bytes:
        lines.append("# The setup ran under a memory cap; to cap the service too:")
        lines.append(f"# MemoryMax={d.setup.memory_limit_bytes}")
    notes = (
        "systemd passes the variables to every process of the service (ExecStartPre/Post "
        "helpers too), which is harmless for a malloc library.",
    )
    return Snippet("systemd", "systemd drop-in", "\n".join(lines) + "\n", "ini", path, notes)


def write_dropin(d: Deployment, directory: Path) -> Path:
    """Write the systemd drop-in under `directory` (e.g. /etc/systemd/system); return its path."""
    base = Path(directory).absolute()
    path = base / d.dropin_relpath
    if not path.resolve().is_relative_to(base.resolve()):
        raise MallocbenchError(f"refusing to write outside {base}: {path}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # systemd and auditors read it; nothing in it is secret
        write_text_atomic(path, d.snippets["systemd"].text, mode=0o644)
    except OSError as exc:
        raise MallocbenchError(
            f"cannot write the drop-in {path}: {exc.strerror or exc} "
            "(write access to the directory is needed; /etc/systemd/system needs root)"
        ) from None
    return path


def remove_dropins(directory: Path, service: str) -> list[Path]:
    """Remove the recording drop-ins of `service` under `directory`: RECORD_DROPIN, and
    an OLD_RECORD_DROPIN that preloads the shim (a file of that name that does not is
    someone else's). Returns what was removed."""
    unit_dir = Path(directory) / f"{service_name(service)}.service.d"
    removed = []
    for name in (RECORD_DROPIN, OLD_RECORD_DROPIN):
        path = unit_dir / name
        if not path.is_file():
            continue
        if name == OLD_RECORD_DROPIN and "libmbrecord" not in dropin_environment(path).get(
            "LD_PRELOAD", ""
        ):
            continue
        try:
            path.unlink()
        except OSError as exc:
            raise MallocbenchError(
                f"cannot remove the drop-in {path}: {exc.strerror or exc} (write access to "
                f"{unit_dir} is needed; /etc/systemd/system needs root)"
            ) from None
        removed.append(path)
    return removed


_C_ESCAPES = {
    "\\": "\\",
    '"': '"',
    "'": "'",
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "s": " ",
}


def _unescape(text: str, i: int, where: str) -> tuple[str, int]:
    """One backslash escape starting after the backslash at text[i-1]; (char, next i)."""
    if i >= len(text):
        raise MallocbenchError(f"{where}: a backslash ends the value")
    char = text[i]
    if char in _C_ESCAPES:
        return _C_ESCAPES[char], i + 1
    for prefix, digits, base in (("x", 2, 16), ("u", 4, 16), ("U", 8, 16)):
        if char == prefix and re.fullmatch(r"[0-9A-Fa-f]+", text[i + 1 : i + 1 + digits] or "-"):
            return chr(int(text[i + 1 : i + 1 + digits], base)), i + 1 + digits
    if re.fullmatch(r"[0-7]{3}", text[i : i + 3]):
        return chr(int(text[i : i + 3], 8)), i + 3
    raise MallocbenchError(f"{where}: invalid escape \\{char}")


def _words(value: str, where: str) -> list[str]:
    """Split an Environment= value as systemd does: quotes group, C escapes apply."""
    words: list[str] = []
    word: list[str] = []
    in_word = False
    quote = ""
    i = 0
    while i < len(value):
        char = value[i]
        i += 1
        if char == "\\":
            escaped, i = _unescape(value, i, where)
            word.append(escaped)
            in_word = True
        elif quote:
            if char == quote:
                quote = ""
            else:
                word.append(char)
        elif char in "\"'":
            quote, in_word = char, True
        elif char.isspace():
            if in_word:
                words.append("".join(word))
            word, in_word = [], False
        else:
            word.append(char)
            in_word = True
    if quote:
        raise MallocbenchError(f"{where}: unterminated quote")
    if in_word:
        words.append("".join(word))
    return [_specifiers(w, where) for w in words]


def _specifiers(word: str, where: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1) in ("%", ""):
            return "%"  # %% is a percent sign; systemd keeps a lone one at the end
        raise MallocbenchError(f"{where}: specifier %{match.group(1)} depends on the host")

    return re.sub(r"%(.?)", one, word, flags=re.DOTALL)


def _service_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the [Service] section, continuations joined."""
    out: list[tuple[int, str]] = []
    section, pending, start = "", "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped[0] in "#;"):
            continue
        if not pending and stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending, start = pending + stripped[:-1] + " ", start or number
            continue
        line, pending = pending + stripped, ""
        if section == "Service":
            out.append((start or number, line))
        start = 0
    return out


# A systemd drop-in is a few lines.
DROPIN_LIMIT = 1024**2


def dropin_environment(path: Path) -> dict[str, str]:
    """The environment a drop-in gives its service: Environment= lines, minus unsets."""
    return unit_environment([path])


def _assignments(path: Path) -> tuple[dict[str, str], list[str]]:
    """A drop-in's Environment= assignments, in order, and its UnsetEnvironment= words."""
    try:
        text = read_bounded(Path(path), DROPIN_LIMIT, "drop-in").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MallocbenchError(f"cannot read the drop-in {path}: {exc}") from None
    env: dict[str, str] = {}
    unset: list[str] = []
    for number, line in _service_lines(text):
        key, _, value = line.partition("=")
        key, value, where = key.strip(), value.strip(), f"{path}:{number}"
        if key == "Environment":
            if not value:
                env.clear()  # an empty assignment resets the list, as in systemd
            for word in _words(value, where):
                name, eq, setting = word.partition("=")
                if not eq or not ENV_NAME.fullmatch(name):
                    raise MallocbenchError(f"{where}: {word!r} is not NAME=VALUE")
                env[name] = setting
        elif key == "UnsetEnvironment":
            unset += _words(value, where)
    return env, unset


def unit_environment(paths: list[Path]) -> dict[str, str]:
    """The environment drop-ins give, applied in the order given (systemd's: by file
    name), a later assignment winning; every unset last, over all of them."""
    env: dict[str, str] = {}
    unset: list[str] = []
    for path in paths:
        assigned, removed = _assignments(path)
        env.update(assigned)
        unset += removed
    for name in unset:  # systemd applies these last, over every assignment
        if "=" in name:
            if env.get(name.partition("=")[0]) == name.partition("=")[2]:
                env.pop(name.partition("=")[0])
        else:
            env.pop(name, None)
    return env


# Where systemd looks for a system unit's drop-ins, the first hiding a same-named file
# in the later ones.
UNIT_DIRS = (
    SYSTEMD_DIR, "/run/systemd/system", "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system", "/lib/systemd/system",
)  # fmt: skip


def unit_files(service: str, dirs: tuple[str, ...] = UNIT_DIRS) -> list[Path]:
    """The unit file of `service` and its drop-ins, in the order systemd applies them
    (the drop-ins by file name)."""
    name = service_name(service)
    unit = next((Path(d) / f"{name}.service" for d in dirs
                 if (Path(d) / f"{name}.service").is_file()), None)  # fmt: skip
    chosen: dict[str, Path] = {}
    for directory in dirs:
        unit_dir = Path(directory) / f"{name}.service.d"
        for path in sorted(unit_dir.glob("*.conf")) if unit_dir.is_dir() else []:
            chosen.setdefault(path.name, path)
    return ([unit] if unit else []) + [chosen[n] for n in sorted(chosen)]
