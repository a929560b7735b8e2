"""Each setup's server build, found and checked before any dataset is loaded or server
started: config keys the build would refuse and plugins it cannot load stop a run here,
as does a setup that records without the recording shim."""

from __future__ import annotations

from mallocbench.errors import MallocbenchError
from mallocbench.native import shim_path
from mallocbench.run.experiment import Experiment, Setup
from mallocbench.servers import families
from mallocbench.servers.family import Build


def resolve_builds(experiment: Experiment) -> dict[str | None, Build]:
    family = families.get(experiment.family)
    builds: dict[str | None, Build] = {}
    for setup in experiment.setups:
        if setup.basedir not in builds:
            builds[setup.basedir] = family.find_build(setup.basedir)
        check_config_keys(experiment, setup, builds[setup.basedir])
    recording = [s.name for s in experiment.setups if s.record]
    if recording:
        try:
            shim_path()
        except MallocbenchError as exc:
            raise MallocbenchError(f"setup {recording[0]} has record = true, but {exc}") from None
    return builds


def check_config_keys(experiment: Experiment, setup: Setup, build: Build) -> None:
    """Refuse, before any dataset is loaded, a config key the setup's server would not
    take on one of the engines, and a plugin it cannot load (the family's check)."""
    families.get(experiment.family).check_settings(
        build,
        {**experiment.server_config, **setup.config},
        [engine.name for engine in experiment.engines],
        f"setup {setup.name}",
    )
