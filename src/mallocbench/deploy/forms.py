"""Make a chosen setup permanent: systemd drop-in, mysqld_safe, containers, my.cnf.

Everything here builds text; the only writes are `write_dropin` and `remove_dropins`,
in the directory the caller names. The environment is taken from the setup as it ran
(`SetupInfo`), so the server in production gets the same LD_PRELOAD and knobs the
measured one had. The recording shim's preload is a deployment too (`recording`), in
the same forms, so `record`, `tune` and `recommend` print one text per form.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mallocbench import allocators
from mallocbench.allocators.base import LIB_DIRS, Allocator
from mallocbench.deploy.install import DEFAULT_PREFIX, installed_shim
from mallocbench.errors import MallocbenchError
from mallocbench.files import read_bounded, write_text_atomic
from mallocbench.model.results import SetupInfo

SYSTEMD_DIR = "/etc/systemd/system"
# systemd reads a unit's drop-ins in name order and the last Environment= of a variable
# wins: the recording one sorts before every other (digits before letters), so a tuned
# drop-in (mallocbench-SETUP.conf) left beside it decides LD_PRELOAD.
RECORD_DROPIN = "00-mallocbench-record.conf"
# The name record's drop-in had before; `remove_dropins` takes it away too.
OLD_RECORD_DROPIN = "mbrecord.conf"
RECORD_MARK = "mallocbench recording shim"
# Where `mallocbench install-shim` puts the shim: readable by a unit with ProtectHome=.
INSTALLED_SHIM_DIR = str(installed_shim(DEFAULT_PREFIX).parent)
# The snippets each form of `--form` (launch.FORMS, in its order) prints.
FORM_SNIPPETS: dict[str, tuple[str, ...]] = {
    "systemd": ("systemd",),
    "mysqld_safe": ("mysqld_safe", "etc_default"),
    "env": ("env",),
    "docker": ("compose",),
    "kubernetes": ("kubernetes",),
}
DEFAULT_SOCKET = "/run/mysqld/mysqld.sock"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Characters systemd takes literally in an unquoted Environment= word; anything else
# (spaces, quotes, backslashes, non-ASCII) goes inside double quotes.
_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_./:,=+@-]*")
_SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9:_.@-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# my.cnf values that need quotes: whitespace, comment starts, quotes, escapes.
_MYCNF_QUOTE = re.compile(r"[\s#;'\"\\]")
_OTHER_ALLOCATORS = r"lib(jemalloc|tcmalloc|mimalloc)"


@dataclass(frozen=True)
class Snippet:
    """One piece of configuration: its text and where it goes."""

    kind: str  # systemd, mysqld_safe, etc_default, env, compose, kubernetes, mycnf
    title: str
    text: str
    language: str  # for a fenced code block: ini, sh, yaml
    path: str | None = None  # where the text goes, when it is a file of its own
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["notes"] = list(self.notes)
        return data


@dataclass
class Deployment:
    """A setup made deployable: the environment to give the server, in every form."""

    setup: SetupInfo
    service: str
    environment: dict[str, str]  # what the server's environment must contain
    preload: str | None  # the LD_PRELOAD library (None: glibc's malloc, nothing to load)
    package: str | None  # the Debian package that ships the library, when one does
    snippets: dict[str, Snippet] = field(default_factory=dict)
    verify: list[str] = field(default_factory=list)  # shell lines to run after a restart
    notes: list[str] = field(default_factory=list)
    shim: str | None = None  # the recording shim, preloaded in front of `preload`

    @property
    def dropin_relpath(self) -> str:
        """`<service>.service.d/mallocbench-<setup>.conf` (the recording's sorts first),
        relative to a unit directory."""
        if self.shim is not None:
            return f"{self.service}.service.d/{RECORD_DROPIN}"
        return f"{self.service}.service.d/mallocbench-{_file_part(self.setup.name)}.conf"

    def to_dict(self) -> dict[str, Any]:
        return {
            "setup": asdict(self.setup),
            "service": self.service,
            "environment": dict(self.environment),
            "preload": self.preload,
            "package": self.package,
            "dropin": f"{SYSTEMD_DIR}/{self.dropin_relpath}",
            "snippets": {kind: s.to_dict() for kind, s in self.snippets.items()},
            "verify": list(self.verify),
            "notes": list(self.notes),
        }


# --- systemd quoting --------------------------------------------------------------------


def _check_assignment(name: str, value: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise MallocbenchError(
            f"{name!r} is not an environment variable name: use letters, digits and '_', "
            "not starting with a digit"
        )
    if _CONTROL.search(value):
        raise MallocbenchError(
            f"{name} has a newline or other control character in its value: a unit file "
            "takes one line per setting, so give the value on one line"
        )


def environment_line(name: str, value: str) -> str:
    """`Environment=NAME=VALUE` as systemd reads it back exactly (quoted when needed)."""
    _check_assignment(name, value)
    # Specifiers are expanded inside quotes too, so a literal % is always doubled.
    word = f"{name}={value}".replace("%", "%%")
    if _SYSTEMD_PLAIN.fullmatch(word):
        return f"Environment={word}"
    return 'Environment="' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dropin_hint(
    environment: Mapping[str, str], what: str = "this", service: str = "mariadb"
) -> str:
    """One sentence on making `environment` permanent, with the exact drop-in lines."""
    lines = " ".join(environment_line(k, v) for k, v in environment.items())
    return (
        f"to make {what} permanent, put [Service] {lines} in a drop-in "
        f"{SYSTEMD_DIR}/{service}.service.d/malloc.conf, then systemctl daemon-reload and "
        f"restart {service} (`mallocbench recommend RUN --write-dropin {SYSTEMD_DIR}` "
        "writes one for the setup a run recommends)"
    )


def permanent_hint(
    environment: Mapping[str, str], what: str, form: str = "systemd", service: str = "mariadb"
) -> str:
    """One sentence on making `environment` permanent in `form` (launch.FORMS)."""
    if form == "systemd":
        return dropin_hint(environment, what, service)
    d = Deployment(
        setup=SetupInfo(name=what, allocator="?"),
        service=_service_name(service),
        environment=dict(environment),
        preload=environment.get("LD_PRELOAD"),
        package=None,
    )
    return f"to make {what} permanent, {form_hint(d, form)}"


# --- the setup's library ----------------------------------------------------------------


def _registry_entry(name: str) -> Allocator | None:
    return next(
        (a for a in allocators.builtin_allocators() if name == a.name or name in a.aliases),
        None,
    )


def stable_library_path(path: str, allocator: Allocator | None) -> str:
    """The soname link for a packaged library, so a package upgrade does not break it.

    The registry resolves links (libtcmalloc.so.4 -> libtcmalloc.so.4.5.10); a preload
    of the versioned file fails after an upgrade, and ld.so then only warns and starts
    the server on glibc's malloc.
    """
    if allocator is None or not os.path.isfile(path):
        return path
    real = os.path.realpath(path)
    for name in allocator.library_names:
        candidate = os.path.join(os.path.dirname(path), name)
        if os.path.isfile(candidate) and os.path.realpath(candidate) == real:
            return candidate
    return path


def _packaged(path: str, allocator: Allocator | None) -> bool:
    """The library is the one the registry's Debian package installs (not a custom build)."""
    if allocator is None or allocator.debian_package is None:
        return False
    return os.path.dirname(path) in LIB_DIRS and allocator.is_mapped_path(path)


def _check_preload(path: str) -> None:
    if not os.path.isabs(path):
        raise MallocbenchError(
            f"the allocator library {path!r} is not an absolute path: LD_PRELOAD in a "
            "service needs the full path of the .so"
        )
    if re.search(r"[\s:]", path):
        raise MallocbenchError(
            f"the allocator library path {path!r} contains a space or colon, where ld.so "
            "splits LD_PRELOAD: link or copy the library to a plain path"
        )


def _resolve_library(setup: SetupInfo) -> tuple[str | None, Allocator | None]:
    """The library to preload (None for glibc) and its registry entry, if any."""
    entry = _registry_entry(setup.allocator)
    if entry is not None and entry.is_builtin:
        return None, entry  # allocator_library is then libc itself: nothing to load
    path = setup.allocator_library or (entry.path if entry is not None else None)
    if path is None:
        hint = entry.install_hint() if entry is not None else "record the .so path"
        raise MallocbenchError(
            f"setup {setup.name}: no library is known for allocator {setup.allocator} "
            f"(none recorded, none installed here): {hint}"
        )
    return stable_library_path(path, entry), entry


# --- the snippets ----------------------------------------------------------------------


def _comment(text: str) -> str:
    return _CONTROL.sub("?", text)


def _describe(setup: SetupInfo, preload: str | None) -> str:
    version = f" {setup.allocator_version}" if setup.allocator_version else ""
    where = f", {preload}" if preload else ""
    return _comment(f'setup "{setup.name}" ({setup.allocator}{version}{where})')


def _what(d: Deployment) -> str:
    if d.shim is None:
        return _describe(d.setup, d.preload)
    front = f" in front of {d.preload}" if d.preload else ""
    return f"the {RECORD_MARK}{front}; it records nothing until `mallocbench record` arms it"


def _systemd_snippet(d: Deployment) -> Snippet:
    path = f"{SYSTEMD_DIR}/{d.dropin_relpath}"
    lines = [
        f"# mallocbench: {_comment(_what(d))}",
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
        lines.append(f"# The setup ran on CPUs {_comment(d.setup.cpus)}; to pin here too:")
        lines.append(f"# CPUAffinity={_comment(d.setup.cpus)}")
    if d.setup.memory_limit_bytes:
        lines.append("# The setup ran under a memory cap; to cap the service too:")
        lines.append(f"# MemoryMax={d.setup.memory_limit_bytes}")
    notes = (
        "systemd passes the variables to every process of the service (ExecStartPre/Post "
        "helpers too), which is harmless for a malloc library.",
    )
    return Snippet("systemd", "systemd drop-in", "\n".join(lines) + "\n", "ini", path, notes)


def _beside_malloc_lib(d: Deployment) -> dict[str, str]:
    """What malloc-lib cannot carry: the knobs, and the allocator behind the shim
    (malloc-lib takes one library; mysqld_safe puts it in front of the LD_PRELOAD it
    was started with, the order the shim needs)."""
    env = {k: v for k, v in d.environment.items() if k != "LD_PRELOAD"}
    if d.shim is not None and d.preload:
        env = {"LD_PRELOAD": d.preload, **env}
    return env


def _mysqld_safe_snippet(d: Deployment) -> Snippet:
    lines = ["[mysqld_safe]"]
    if d.shim or d.preload:
        lines.append(f"malloc-lib={d.shim or d.preload}")
    else:
        lines.append("# glibc's malloc: an empty malloc-lib cancels one set in another file")
        lines.append("malloc-lib=")
    knobs = _beside_malloc_lib(d)
    notes = [
        "Only read when the server is started by mysqld_safe (SysV init, or by hand); "
        "the systemd service starts mariadbd directly and ignores it.",
    ]
    if knobs:
        notes.append(
            f"malloc-lib cannot carry {', '.join(knobs)}: they must be in the environment "
            f"mysqld_safe starts with ({_default_file(d.service)} below, or exported in "
            "the shell that starts it)."
        )
    return Snippet(
        "mysqld_safe", "mysqld_safe (my.cnf)", "\n".join(lines) + "\n", "ini", None, tuple(notes)
    )


def _default_file(service: str) -> str:
    return f"/etc/default/{service}"


def _etc_default_snippet(d: Deployment) -> Snippet | None:
    knobs = _beside_malloc_lib(d)
    if not knobs:
        return None
    lines = [
        f"# {_default_file(d.service)}: sourced by the SysV init script; export passes the",
        "# variables on through mysqld_safe to the server.",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in knobs.items()]
    return Snippet(
        "etc_default",
        "allocator knobs for mysqld_safe",
        "\n".join(lines) + "\n",
        "sh",
        _default_file(d.service),
    )


def _yaml_value(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar. Compose interpolates $VAR and
    # Kubernetes $(VAR); both read $$ as one literal $.
    return json.dumps(value.replace("$", "$$"))


def _env_snippet(d: Deployment) -> Snippet:
    words = [f"{k}={shlex.quote(v)}" for k, v in d.environment.items()]
    if "LD_PRELOAD" not in d.environment:
        words.insert(0, "-u LD_PRELOAD")  # glibc's malloc: no inherited preload
    lines = [
        "# Started by hand or by a script of your own: start it with this environment",
        "# (the variables must reach mariadbd itself; sudo and su drop them unless kept).",
        f"env {' '.join(words)} mariadbd [its usual options]",
    ]
    return Snippet("env", "plain environment", "\n".join(lines) + "\n", "sh")


def _image_comment(d: Deployment) -> str:
    if d.shim is not None:
        return (
            f"# {d.shim} must exist inside the container: mount it from the host "
            "read-only at that path."
        )
    if d.preload is None:
        return "# glibc's malloc: nothing to preload; make sure the image sets no LD_PRELOAD."
    if d.package:
        return (
            f"# {d.preload} must exist inside the image: "
            f"apt-get install -y {d.package} in its Dockerfile (Debian/Ubuntu images)."
        )
    return f"# {d.preload} is a custom library: copy or mount it into the image at that path."


def _compose_snippet(d: Deployment) -> Snippet:
    lines = ["services:", f"  {d.service}:", "    " + _comment(_image_comment(d))]
    if d.shim is not None:
        lines += ["    volumes:", f"      - {_yaml_value(f'{d.shim}:{d.shim}:ro')}"]
    if d.environment:
        lines.append("    environment:")
        lines += [f"      {k}: {_yaml_value(v)}" for k, v in d.environment.items()]
    else:
        lines.append("    environment: {}")
    return Snippet("compose", "Docker Compose", "\n".join(lines) + "\n", "yaml")


def _kubernetes_snippet(d: Deployment) -> Snippet:
    lines = ["# in the MariaDB container's spec", _comment(_image_comment(d))]
    if d.shim is not None:
        where = os.path.dirname(d.shim)
        lines.append(
            f"# e.g. in the pod spec: volumes: [{{name: mallocbench-shim, hostPath: {{path: "
            f"{_yaml_value(where)}}}}}], and here:"
        )
        lines += ["volumeMounts:", "  - name: mallocbench-shim",
                  f"    mountPath: {_yaml_value(where)}",
                  "    readOnly: true"]  # fmt: skip
    if d.environment:
        lines.append("env:")
        for k, v in d.environment.items():
            lines += [f"  - name: {k}", f"    value: {_yaml_value(v)}"]
    else:
        lines.append("env: []")
    return Snippet("kubernetes", "Kubernetes container env", "\n".join(lines) + "\n", "yaml")


def _mycnf_value(key: str, value: str) -> str:
    if _CONTROL.search(value):
        raise MallocbenchError(
            f"config {key} has a newline or other control character in its value: "
            "give the value on one line"
        )
    if value and not _MYCNF_QUOTE.search(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _mycnf_snippet(d: Deployment) -> Snippet | None:
    if not d.setup.config:
        return None
    path = f"/etc/mysql/mariadb.conf.d/99-mallocbench-{_file_part(d.setup.name)}.cnf"
    lines = [f"# mallocbench: server options of {_describe(d.setup, None)}", "[mysqld]"]
    for key, value in d.setup.config.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", key):
            raise MallocbenchError(f"config key {key!r} is not a server option name")
        lines.append(f"{key} = {_mycnf_value(key, str(value))}")
    notes = (
        "The path is Debian's for MariaDB; files there are read in name order, so 99- "
        "comes last and wins. Elsewhere use any file the server reads (e.g. /etc/my.cnf.d/).",
    )
    return Snippet("mycnf", "my.cnf options", "\n".join(lines) + "\n", "ini", path, notes)


def _verify_lines(d: Deployment) -> list[str]:
    lines = [
        f"PID=$(systemctl show --property MainPID --value {d.service})"
        "   # or: pidof -s mariadbd mysqld",
        f'mallocbench memory --socket {DEFAULT_SOCKET} --pid "$PID"'
        "   # its allocator line names the mapped library",
    ]
    if d.preload:
        # maps shows the resolved file; a soname link is a prefix of it (.so.4 -> .so.4.5.10)
        real = os.path.realpath(d.preload)
        seen = d.preload if real.startswith(d.preload) else real
        lines.append(
            f'grep -m1 -F {shlex.quote(seen)} /proc/"$PID"/maps'
            "   # one line: the library is mapped; nothing: the preload failed"
        )
    else:
        lines.append(
            f"grep -m1 -E '{_OTHER_ALLOCATORS}' /proc/\"$PID\"/maps"
            "   # nothing: no other allocator is mapped"
        )
    if d.environment:
        # Not a grep of /proc/PID/environ: GLIBC_TUNABLES and MALLOC_CONF hold several
        # settings on one line, which read as if all but one were lost.
        lines.append(
            'mallocbench check --pid "$PID"'
            "   # as root: the allocator mapped and each setting in force, one a line"
        )
    return lines


# --- the whole deployment --------------------------------------------------------------


def _file_part(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip(".") or "setup"


def _service_name(service: str) -> str:
    name = service.removesuffix(".service")
    if not _SERVICE_NAME.fullmatch(name):
        raise MallocbenchError(
            f"{service!r} is not a systemd service name: give e.g. mariadb or mysql"
        )
    return name


def _environment(setup: SetupInfo, preload: str | None) -> dict[str, str]:
    env = {"LD_PRELOAD": preload} if preload else {}
    env.update({k: str(v) for k, v in setup.knobs.items()})  # as the run applied them
    try:
        for name, value in env.items():
            _check_assignment(name, value)
        if "LD_PRELOAD" in env:
            _check_preload(env["LD_PRELOAD"])
    except MallocbenchError as exc:
        raise MallocbenchError(f"setup {setup.name}: {exc}") from None
    return env


def deployment_for(setup: SetupInfo, service: str = "mariadb") -> Deployment:
    """Every snippet that makes `setup` permanent for the systemd unit `service`."""
    preload, entry = _resolve_library(setup)
    env = _environment(setup, preload)
    preload = env.get("LD_PRELOAD")
    d = Deployment(
        setup=setup,
        service=_service_name(service),
        environment=env,
        preload=preload,
        package=entry.debian_package if entry and preload and _packaged(preload, entry) else None,
    )
    if preload and not os.path.isfile(preload):
        d.notes.append(f"{preload} does not exist on this host: install it where the server runs")
    d.notes += _unreadable_notes(d)
    if setup.thp:
        d.notes.append(
            f"the setup ran with transparent huge pages '{setup.thp}' for the server only; "
            "systemd has no per-service setting for it: set it for the host "
            "(/sys/kernel/mm/transparent_hugepage/enabled) or, with jemalloc, in MALLOC_CONF"
        )
    return _with_snippets(d)


def _with_snippets(d: Deployment) -> Deployment:
    parts = [
        _systemd_snippet(d),
        _mysqld_safe_snippet(d),
        _etc_default_snippet(d),
        _env_snippet(d),
        _compose_snippet(d),
        _kubernetes_snippet(d),
        _mycnf_snippet(d),
    ]
    d.snippets = {s.kind: s for s in parts if s is not None}
    d.verify = _verify_lines(d)
    return d


def _unreadable_notes(d: Deployment) -> list[str]:
    """Libraries a hardened unit cannot read: ProtectHome=true (Debian's mariadb.service)
    hides /root and /home, and ld.so then only warns and starts the server without."""
    libs = [lib for lib in (d.shim, d.preload) if lib]
    notes = []
    for lib in libs:
        top = next((t for t in ("/root", "/home") if lib.startswith(t + "/")), None)
        if top is None:
            continue
        fix = (
            f"copy it to {INSTALLED_SHIM_DIR}/ with `mallocbench install-shim` (as root) and "
            "print this again"
            if lib == d.shim
            else "copy it to a system directory such as /usr/local/lib/ and preload it there"
        )
        notes.append(
            f"{lib} is under {top}, which a unit with ProtectHome=true (Debian's "
            "mariadb.service has it) hides and the server's user may not enter: the server "
            f"would start without it; {fix}"
        )
    return notes


def recording(
    shim: str, allocator: str = "glibc", library: str | None = None, service: str = "mariadb"
) -> Deployment:
    """The recording shim preloaded in front of the server's allocator `library` (None:
    glibc's malloc), in every form: the shim's malloc is then the one called, and it
    forwards to the allocator's."""
    libs = [shim] + ([library] if library else [])
    for lib in libs:
        _check_preload(lib)
    d = Deployment(
        setup=SetupInfo(name="record", allocator=allocator, allocator_library=library),
        service=_service_name(service),
        environment={"LD_PRELOAD": " ".join(libs)},
        preload=library,
        package=None,
        shim=shim,
    )
    d.notes += _unreadable_notes(d)
    return _with_snippets(d)


def render_form(d: Deployment, form: str) -> str:
    """The snippets of one form (FORM_SNIPPETS) as plain text to copy: each one's file,
    text and notes, the deployment's notes first."""
    out = [f"# note: {_comment(n)}" for n in d.notes]
    for kind in FORM_SNIPPETS[form]:
        snippet = d.snippets.get(kind)
        if snippet is None:
            continue
        if out:
            out.append("")
        if snippet.path and snippet.path not in snippet.text:
            out.append(f"# {snippet.path}:")
        out.append(snippet.text.rstrip("\n"))
        out += [f"# {_comment(n)}" for n in snippet.notes]
    return "\n".join(out) + "\n"


def form_hint(d: Deployment, form: str) -> str:
    """The form in one sentence, for an error line: what to set and where."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in d.environment.items())
    if form == "systemd":
        lines = " ".join(environment_line(k, v) for k, v in d.environment.items())
        return (
            f"put [Service] {lines} in {SYSTEMD_DIR}/{d.dropin_relpath}, systemctl "
            f"daemon-reload and restart {d.service}"
        )
    if form == "mysqld_safe":
        beside = " ".join(f"{k}={shlex.quote(v)}" for k, v in _beside_malloc_lib(d).items())
        extra = (
            f" with {beside} in its environment (e.g. exported in {_default_file(d.service)})"
            if beside
            else ""
        )
        lib = d.shim or d.preload
        put = f"put malloc-lib={lib} in the [mysqld_safe] section of my.cnf and " if lib else ""
        return f"{put}restart the server through mysqld_safe{extra}"
    if form in ("docker", "kubernetes"):
        where = "the Compose service's" if form == "docker" else "the container spec's"
        mount = f" and mount {d.shim} into it read-only" if d.shim else ""
        return f"set {env} in {where} environment{mount}, and recreate the container"
    return f"start the server with {env} in its environment"


def render(d: Deployment) -> str:
    """The deployment as Markdown: a heading per form, the text in fenced blocks."""
    out = [f"## Deploying setup `{_comment(d.setup.name)}`", ""]
    if d.preload:
        package = f" (Debian package `{d.package}`)" if d.package else " (a custom library)"
        out.append(f"Preload `{d.preload}`{package}.")
    else:
        out.append("glibc's malloc: no library to preload.")
    if d.environment:
        out.append("Environment: " + ", ".join(f"`{k}={v}`" for k, v in d.environment.items()))
    out += [f"Note: {n}" for n in d.notes]
    for snippet in d.snippets.values():
        out += ["", f"### {snippet.title}", ""]
        if snippet.path:
            out += [f"`{snippet.path}`:", ""]
        out += [f"```{snippet.language}", snippet.text.rstrip("\n"), "```"]
        out += [f"\n{n}" for n in snippet.notes]
    out += ["", "### Verify after the restart", "", "```sh", *d.verify, "```"]
    return "\n".join(out) + "\n"


# --- writing and reading drop-ins ------------------------------------------------------


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
    unit_dir = Path(directory) / f"{_service_name(service)}.service.d"
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
                if not eq or not _ENV_NAME.fullmatch(name):
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
    name = _service_name(service)
    unit = next((Path(d) / f"{name}.service" for d in dirs
                 if (Path(d) / f"{name}.service").is_file()), None)  # fmt: skip
    chosen: dict[str, Path] = {}
    for directory in dirs:
        unit_dir = Path(directory) / f"{name}.service.d"
        for path in sorted(unit_dir.glob("*.conf")) if unit_dir.is_dir() else []:
            chosen.setdefault(path.name, path)
    return ([unit] if unit else []) + [chosen[n] for n in sorted(chosen)]
