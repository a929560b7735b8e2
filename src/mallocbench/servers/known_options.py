"""The options a server build knows, so a typo in a setup's config is refused before a run.

A key the server does not know stops it at start (`unknown variable`), after the
dataset load, with a message that names no setup; with `loose-` it is ignored, and the
setup would be measured as if it had taken. The build itself is the judge: its
`--help --verbose` lists every option, those of the plugins loaded with it included
(rocksdb_* exist only with ha_rocksdb), and says which plugin it could not load. The
list takes about a second to produce, so it is kept per build and plugin set in the
cache directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mallocbench.errors import MallocbenchError, did_you_mean
from mallocbench.files import cache_root, write_text_atomic
from mallocbench.servers.mariadb import ServerBuild, server_user
from mallocbench.servers.options import OPTION_PREFIXES, option_key
from mallocbench.servers.taken import PLUGIN_OPTIONS

# `  --name`, `  --name=#`, `  -a, --name[=name]` at the start of a line of --help.
_OPTION_LINE = re.compile(r"^  (?:-\w, )?--([A-Za-z0-9][A-Za-z0-9_.-]*)", re.MULTILINE)
_PLUGIN_ERROR = re.compile(r"\[ERROR\] (?:\S+: )?(Can't open shared library .*|Couldn't load .*)")
# MariaDB 10.11 lists 692 options; fewer than this is not its --help.
_FEWEST_OPTIONS = 100
# Bumped when what is kept changes, so an older cache entry is not read.
_CACHE_FORMAT = 1


@dataclass(frozen=True)
class KnownOptions:
    """What one build, with some plugins loaded, accepts in its [mysqld] group."""

    build: str  # "mariadb 10.11.19": for messages
    names: frozenset[str]  # lower case, '_' for '-'
    plugin_error: str | None = None  # the first line saying a plugin could not be loaded

    def problem(self, name: str) -> str | None:
        """Why the server would not take config key `name`, or None when it would."""
        key = option_key(name)
        loose = key.startswith("loose_")
        key = key.removeprefix("loose_")
        if self._knows(key):
            return None
        near = did_you_mean(key, self.names)
        if loose:
            return (
                f"config key {name} is not an option of {self.build}{near}, so the server "
                "would ignore it (loose-) and the setup would not be what it says: spell it "
                "right or remove it"
            )
        return (
            f"config key {name} is not an option of {self.build}{near}: check its spelling "
            "(`mariadbd --help --verbose` lists them; a plugin's options need it in "
            "plugin_load_add)"
        )

    def _knows(self, key: str) -> bool:
        # A structured option (hot_cache.key_buffer_size) is its last part; boolean and
        # limit prefixes are how the server reads skip_x, maximum_x.
        key = key.rsplit(".", 1)[-1]
        spellings = {key} | {key.removeprefix(p) for p in OPTION_PREFIXES if key.startswith(p)}
        if spellings & self.names:
            return True
        # getopt-prefix-matching is on: any unambiguous beginning of an option is it.
        return any(sum(1 for n in self.names if n.startswith(s)) == 1 for s in spellings)


def plugins_asked(config: Mapping[str, str]) -> tuple[str, ...]:
    """The plugin-load values of a config, in a stable order (the cache key's part): their
    libraries' options exist only when they are loaded."""
    return tuple(sorted(v for k, v in config.items() if option_key(k) in PLUGIN_OPTIONS))


def known_options(
    build: ServerBuild, plugins: Iterable[str] = (), cache: Path | None = None
) -> KnownOptions | None:
    """The options `build` knows with `plugins` (plugin_load_add values) loaded; None
    when the build does not list them (the check after start still guards the run)."""
    plugins = tuple(sorted(set(plugins)))
    where = _cache_file(build, plugins, cache)
    if where is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            kept = json.loads(where.read_text())
            if kept["format"] == _CACHE_FORMAT:
                return KnownOptions(build.label, frozenset(kept["names"]))
    found = _ask(build, plugins)
    if found is not None and where is not None and found.plugin_error is None:
        # A plugin that failed to load may be installed later: only a clean list is kept.
        with contextlib.suppress(OSError):
            where.parent.mkdir(parents=True, exist_ok=True)
            kept_text = json.dumps({"format": _CACHE_FORMAT, "names": sorted(found.names)})
            write_text_atomic(where, kept_text)
    return found


def _ask(build: ServerBuild, plugins: tuple[str, ...]) -> KnownOptions | None:
    command = [build.mysqld, "--no-defaults", *(f"--plugin-load-add={p}" for p in plugins)]
    if build.basedir:
        command.append(f"--basedir={build.basedir}")
    user = server_user()
    if user is not None:  # as the server will run: some builds refuse root, --help too
        command.append(f"--user={user.name}")
    try:
        out = subprocess.run(
            [*command, "--help", "--verbose"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MallocbenchError(
            f"cannot list the options of {build.mysqld} ({exc}): check that the server "
            "build runs (`mariadbd --help --verbose`)"
        ) from None
    names = frozenset(option_key(n) for n in _OPTION_LINE.findall(out.stdout))
    if out.returncode != 0 or len(names) < _FEWEST_OPTIONS:
        return None  # not a list to judge by: another build's --help, or none
    error = _PLUGIN_ERROR.search(out.stderr)
    return KnownOptions(build.label, names, error.group(1).strip() if error else None)


def _cache_file(build: ServerBuild, plugins: tuple[str, ...], cache: Path | None) -> Path | None:
    """Where this build's list is kept: named by the binary's identity and the plugins,
    so a rebuilt or upgraded server is asked again."""
    try:
        stat = os.stat(build.mysqld)
    except OSError:
        return None
    cache = cache_root() if cache is None else cache
    identity = [build.mysqld, build.basedir, build.version, stat.st_size, stat.st_mtime_ns, plugins]
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]
    return cache / "server-options" / f"{digest}.json"
