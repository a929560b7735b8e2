"""Deploying to a running PostgreSQL server: `record --print-dropin --pid` on one of its
processes gives the forms a PostgreSQL service reads (Debian's postgresql@<version>-<cluster>
unit, env, Compose, Kubernetes), for its postmaster; no MariaDB form (mysqld_safe, my.cnf)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from mallocbench.deploy import systemd
from mallocbench.replay import preload
from mallocbench.servers.postgresql import attach
from mallocbench.servers.postgresql.server import PgServer
from test_postgresql_memory import _backend, _cli, busy  # noqa: F401
from test_postgresql_server import golden, pg_build  # noqa: F401


def test_print_dropin_on_a_backend_gives_the_postgresql_forms_of_its_postmaster(
    busy: PgServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    service = f"postgresql@{(busy.server_version or '').split('.')[0]}-main"
    with busy.connect() as conn:
        backend = _backend(conn)
        code, out, err = _cli("record", "--print-dropin", "--pid", str(backend))
        _, unit, _ = _cli("record", "--print-dropin", "--pid", str(backend), "--form", "systemd")
        d, started = preload.recording_for(backend)
        default = preload.default_service(backend)
    assert code == 0, err
    assert started is not None and started.pid == busy.pid
    assert out.startswith(f"# process {busy.pid} runs as {started.form}:")
    assert d.service == service and default == service
    assert set(d.snippets) == {"systemd", "env", "compose", "kubernetes"}
    # The shim in front of the allocator the postmaster has mapped (jemalloc here).
    assert d.environment["LD_PRELOAD"] == f"{preload.record_shim()} {busy.allocator_path}"
    assert f"/etc/systemd/system/{service}.service.d/" in unit
    # No MariaDB form is offered or printed.
    assert "malloc-lib=" not in out + unit and "mysqld" not in out + unit
    assert "pg_ctlcluster also reads /etc/postgresql/" in unit
    # A Compose service name takes no "@"; the container is PostgreSQL's.
    assert d.snippets["compose"].text.splitlines()[1] == "  postgresql:"
    assert "PostgreSQL container" in d.snippets["kubernetes"].text
    path = systemd.write_dropin(d, tmp_path)
    assert path.parent == tmp_path / f"{service}.service.d"
    assert systemd.dropin_environment(path) == d.environment
    removed = _cli("record", "--remove-dropin", "--service", service, "--units-dir", str(tmp_path))
    assert removed[0] == 0 and f"removed {path}" in removed[1] and not path.exists()


def test_without_postmaster_pid_the_socket_comes_from_the_command_line() -> None:
    """A data directory this user cannot read: -p and -c unix_socket_directories say where
    (a shell stands in for the postmaster: only its arguments are read)."""
    args = ["-p", "5499", "-c", "unix_socket_directories=/tmp/pg-a, /tmp/pg-b"]
    proc = subprocess.Popen(["sh", "-c", "sleep 30", "postgres", *args])
    try:
        # Until the child has exec'd, its command line is still this interpreter's.
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        deadline = time.monotonic() + 10
        while b"unix_socket_directories" not in cmdline.read_bytes():
            assert time.monotonic() < deadline, "the stand-in never started"
            time.sleep(0.01)
        place = attach.where(proc.pid)
        given = attach.where(proc.pid, socket="/srv/pg/.s.PGSQL.6000")
        assert attach.postmaster_of(proc.pid) is None  # no PostgreSQL process
    finally:
        proc.kill()
        proc.wait()
    assert (place.socket_dir, place.port, place.source) == ("/tmp/pg-a", 5499, "command line")
    assert place.socket == "/tmp/pg-a/.s.PGSQL.5499"
    assert (given.socket_dir, given.port, given.source) == ("/srv/pg", 6000, "given")
