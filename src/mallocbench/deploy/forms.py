"""Make a chosen setup permanent: systemd drop-in, mysqld_safe, containers, my.cnf.

A deployment (deployment.py) is rendered in every form, each form's text built by its
own module (systemd, mysqld_safe, containers, mycnf). Everything builds text; the only
writes are systemd's `write_dropin` and `remove_dropins`, in the directory the caller
names. The environment is taken from the setup as it ran
(`SetupInfo`), so the server in production gets the same LD_PRELOAD and knobs the
measured one had. The recording shim's preload is a deployment too (`recording`), in
the same forms, so `record`, `tune` and `recommend` print one text per form.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

from mallocbench.deploy.containers import compose_snippet, env_snippet, kubernetes_snippet
from mallocbench.deploy.deployment import (
    DEFAULT_SOCKET,
    FORM_SNIPPETS,
    INSTALLED_SHIM_DIR,
    OTHER_ALLOCATORS,
    SYSTEMD_DIR,
    Deployment,
    check_preload,
    comment,
    environment,
    packaged,
    resolve_library,
    service_name,
)
from mallocbench.deploy.mycnf import mycnf_snippet
from mallocbench.deploy.mysqld_safe import (
    beside_malloc_lib,
    default_file,
    etc_default_snippet,
    mysqld_safe_snippet,
)
from mallocbench.deploy.systemd import environment_line, systemd_snippet
from mallocbench.model.results import SetupInfo


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
        service=service_name(service),
        environment=dict(environment),
        preload=environment.get("LD_PRELOAD"),
        package=None,
    )
    return f"to make {what} permanent, {form_hint(d, form)}"


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
            f"grep -m1 -E '{OTHER_ALLOCATORS}' /proc/\"$PID\"/maps"
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


def deployment_for(setup: SetupInfo, service: str = "mariadb") -> Deployment:
    """Every snippet that makes `setup` permanent for the systemd unit `service`."""
    preload, entry = resolve_library(setup)
    env = environment(setup, preload)
    preload = env.get("LD_PRELOAD")
    d = Deployment(
        setup=setup,
        service=service_name(service),
        environment=env,
        preload=preload,
        package=entry.debian_package if entry and preload and packaged(preload, entry) else None,
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
        systemd_snippet(d),
        mysqld_safe_snippet(d),
        etc_default_snippet(d),
        env_snippet(d),
        compose_snippet(d),
        kubernetes_snippet(d),
        mycnf_snippet(d),
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
        check_preload(lib)
    d = Deployment(
        setup=SetupInfo(name="record", allocator=allocator, allocator_library=library),
        service=service_name(service),
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
    out = [f"# note: {comment(n)}" for n in d.notes]
    for kind in FORM_SNIPPETS[form]:
        snippet = d.snippets.get(kind)
        if snippet is None:
            continue
        if out:
            out.append("")
        if snippet.path and snippet.path not in snippet.text:
            out.append(f"# {snippet.path}:")
        out.append(snippet.text.rstrip("\n"))
        out += [f"# {comment(n)}" for n in snippet.notes]
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
        beside = " ".join(f"{k}={shlex.quote(v)}" for k, v in beside_malloc_lib(d).items())
        extra = (
            f" with {beside} in its environment (e.g. exported in {default_file(d.service)})"
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
    out = [f"## Deploying setup `{comment(d.setup.name)}`", ""]
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
