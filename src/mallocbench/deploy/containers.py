"""The container forms: an env file, Docker Compose and Kubernetes, with what the image
must hold for the preload to load.
"""

from __future__ import annotations

import json
import os
import shlex

from mallocbench.deploy.deployment import Deployment, Snippet, comment


def _yaml_value(value: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar. Compose interpolates $VAR and
    # Kubernetes $(VAR); both read $$ as one literal $.
    return json.dumps(value.replace("$", "$$"))


def env_snippet(d: Deployment) -> Snippet:
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


def compose_snippet(d: Deployment) -> Snippet:
    lines = ["services:", f"  {d.service}:", "    " + comment(_image_comment(d))]
    if d.shim is not None:
        lines += ["    volumes:", f"      - {_yaml_value(f'{d.shim}:{d.shim}:ro')}"]
    if d.environment:
        lines.append("    environment:")
        lines += [f"      {k}: {_yaml_value(v)}" for k, v in d.environment.items()]
    else:
        lines.append("    environment: {}")
    return Snippet("compose", "Docker Compose", "\n".join(lines) + "\n", "yaml")


def kubernetes_snippet(d: Deployment) -> Snippet:
    lines = ["# in the MariaDB container's spec", comment(_image_comment(d))]
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
