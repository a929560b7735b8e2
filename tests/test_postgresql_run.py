"""PostgreSQL through `mallocbench run`: an experiment that names the family runs end to
end on real private PostgreSQL servers, with the reports and recommendation MariaDB's
runs get, and what the family cannot take is refused in one line before anything is
loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_runner import GLIBC_AND_JE, run_cli, small_experiment
from mallocbench.commands.recommend import _deployment as recommend_deployment
from mallocbench.store.loading import load_result


def _experiment(tmp_path: Path, top: str = "", server: str = "") -> Path:
    return small_experiment(
        tmp_path, file="pgtiny.toml", name="pgtiny", base="glibc", engines=None, threads=2,
        top=f"repeats = 2\n{top}", server=f'family = "postgresql"\n{server}', step=2,
        extra=None, setups=GLIBC_AND_JE, setup_extra=None,
    )  # fmt: skip


@pytest.mark.server
def test_a_postgresql_experiment_runs_end_to_end_and_its_reports_name_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    ran = run_cli("run", str(_experiment(tmp_path)), "--out", str(out), "-q")
    assert ran.returncode == 0, ran.stderr[-2000:]

    data = json.loads((out / "results.json").read_text())
    assert data["metadata"]["server_versions"][0].startswith("postgresql 15")
    cells = data["cells"]
    assert len(cells) == 4  # 2 setups x 2 repeats
    for cell in cells:
        assert cell["status"] == "ok", cell
        assert cell["engine"] == "postgresql" and cell["qps"] > 100
        # The whole server's PSS (postmaster and backends, shared memory once).
        assert 8 << 20 < cell["peak_rss_bytes"] < 1 << 30
        # The cell's account is PostgreSQL's own, and its parts add up.
        metrics = cell["metrics"]
        parts = sum(
            metrics[k]
            for k in ("pss_shared_memory_bytes", "pss_private_anon_bytes", "pss_files_bytes")
        )
        assert parts == pytest.approx(metrics["pss_total_bytes"], rel=0.05)
        # The backends' CPU time is the server's, not the postmaster's idle loop.
        assert metrics["server_cpu_us_per_op"] > 0
    # Each server ran under the allocator asked for, as found in its maps.
    libraries = {c["setup"]: c["allocator_path"] for c in cells}
    assert "libjemalloc" in libraries["je"] and "libc.so" in libraries["glibc"]

    report = (out / "report.md").read_text()
    assert "server: postgresql 15" in report
    assert "## Relative QPS: postgresql, 2 client thread(s)" in report
    said = run_cli("recommend", str(out))
    assert said.returncode == 0, said.stderr
    assert "\npostgresql: " in said.stdout
    # A change recommended would be deployed to PostgreSQL's unit, in its forms.
    result = load_result(str(out))
    chosen = next(s for s in result.setups if s.name == "je")
    deployment = recommend_deployment(result, chosen, "mariadb")
    assert deployment.service == "postgresql@15-main"
    assert "mycnf" not in deployment.snippets and "systemd" in deployment.snippets


def test_an_unknown_postgresql_setting_is_refused_before_the_dataset_loads(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    exp = _experiment(tmp_path, server='config = { shared_bufers = "64MB" }')
    ran = run_cli(
        "run", str(exp), "--out", str(tmp_path / "out"), env={"MALLOCBENCH_CACHE": str(cache)}
    )
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("mallocbench: error: setup glibc: ")
    assert "shared_bufers" in lines[0] and "shared_buffers" in lines[0]
    assert not (cache / "datasets").exists()  # refused before any load


@pytest.mark.parametrize(
    ("top", "refused"),
    [
        ('engines = ["innodb"]', "PostgreSQL has no storage engine 'innodb'"),
        ('engines = ["myrocks"]', "PostgreSQL has no storage engine 'myrocks'"),
        ('alternate = "turns"', 'a PostgreSQL server cannot take alternate = "turns"'),
        ("record = true", "a PostgreSQL server cannot take record = true"),
    ],
)
def test_what_postgresql_cannot_take_is_refused_in_one_line(
    tmp_path: Path, top: str, refused: str
) -> None:
    ran = run_cli("run", str(_experiment(tmp_path, top=top)), "--dry-run")
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mallocbench: error: "), ran.stderr
    assert refused in lines[0]


def test_a_misspelt_family_is_refused_with_the_nearest_name(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    exp.write_text(exp.read_text().replace('family = "postgresql"', 'family = "postgres"'))
    ran = run_cli("run", str(exp), "--dry-run")
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown server family 'postgres'" in lines[0], ran.stderr
    assert "did you mean 'postgresql'" in lines[0] or "postgresql" in lines[0]


def test_a_soak_event_postgresql_does_not_run_is_refused_in_one_line(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    exp.write_text(exp.read_text() + '\n[[soak.event]]\naction = "backup"\nevery = "5s"\n')
    ran = run_cli("soak", str(exp), "--duration", "10s", "--out", str(tmp_path / "out"))
    assert ran.returncode != 0
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert (
        "action = 'backup' is not an event a postgresql server runs: use one of big-sort"
        in (lines[0])
    )
    assert lines[0].startswith(f"mallocbench: error: {exp}:"), lines[0]  # at its line
    assert not (tmp_path / "out").exists()  # refused before anything ran
