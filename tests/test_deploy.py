"""The Kubernetes manifests in deploy/kubernetes, checked against the schemas of the
things that will read them: Kubernetes' own (kubernetes-validate, strict), Ray Serve's
config schema for the RayService's Serve config, and Parley's settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import validate

from parley.cli_parser import build_parser
from parley.cluster.deployment import DRAIN_MARGIN_S
from parley.config import Settings
from parley.runtime.metrics import Metrics

KUBERNETES = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
PLAIN, RAYSERVICE = KUBERNETES / "parley.yaml", KUBERNETES / "rayservice.yaml"
K8S_VERSION = "1.37.0"


def resources(path: Path) -> dict[str, dict]:
    return {r["kind"]: r for r in yaml.safe_load_all(path.read_text()) if r}


def env_value(container: dict, name: str) -> str:
    return next(e["value"] for e in container.get("env", []) if e["name"] == name)


@pytest.mark.parametrize("path", [PLAIN, RAYSERVICE], ids=lambda p: p.name)
def test_kubernetes_validate_prints_no_error(path):
    run = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S_VERSION, str(path)],
        capture_output=True,
        text=True,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0 and "ERROR" not in output and "FATAL" not in output, output
    if path == PLAIN:
        assert output.count("INFO") == 4, output  # each resource was checked, not skipped


def test_the_rayservice_pod_templates_are_valid_kubernetes():
    """kubernetes-validate has no schema for KubeRay's RayService (a custom resource):
    its pod templates are checked as what Kubernetes makes of them."""
    cluster = resources(RAYSERVICE)["RayService"]["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in groups:
        validate(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": group.get("groupName", "head")},
                "template": group["template"],
            },
            K8S_VERSION,
            strict=True,
        )


def test_the_rayservice_serve_config_builds_parley(monkeypatch):
    """Ray Serve's own schema accepts the Serve config, and its import path builds the
    application from its args (Parley's settings) without starting anything. The proxy
    listens on all interfaces, so it takes API keys: the pods' secret gives them."""
    monkeypatch.setenv("PARLEY_API_KEYS", '{"app": "from-the-secret"}')
    from ray.serve.schema import ServeDeploySchema

    from parley.cluster.deployment import build

    service = resources(RAYSERVICE)["RayService"]
    config = ServeDeploySchema.model_validate(yaml.safe_load(service["spec"]["serveConfigV2"]))
    [app] = config.applications
    assert app.import_path == "parley.cluster.deployment:build"
    settings = Settings(**app.args)
    assert build(app.args) is not None
    worker = service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    # Serve kills a stopping replica drain_timeout_s + DRAIN_MARGIN_S after the stop
    # began; the pod's grace period must leave that time.
    assert (
        worker["terminationGracePeriodSeconds"] >= settings.server.drain_timeout_s + DRAIN_MARGIN_S
    )
    assert (
        worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        == settings.cluster.num_gpus
    )


def test_the_plain_deployment_drains_before_it_stops(tmp_path):
    found = resources(PLAIN)
    pod = found["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    # its keys are the Secret's file, read again when the kubelet updates it
    args = build_parser(dict.fromkeys(["serve", "cluster", "stream", "transcribe", "models"]))
    key_file = Path(vars(args.parse_args(container["args"]))["api_keys_file"])
    [mount] = container["volumeMounts"]
    [volume] = pod["volumes"]
    assert key_file.parent == Path(mount["mountPath"]) and mount["name"] == volume["name"]
    assert volume["secret"]["secretName"] == "parley-keys"
    drain_s = float(env_value(container, "PARLEY_SERVER__DRAIN_TIMEOUT_S"))
    assert pod["terminationGracePeriodSeconds"] >= drain_s + DRAIN_MARGIN_S
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "kill -TERM 1" in " ".join(container["lifecycle"]["preStop"]["exec"]["command"])
    # the HPA scales on the servers' own gauge of their measured capacity used
    metric = found["HorizontalPodAutoscaler"]["spec"]["metrics"][0]["pods"]["metric"]["name"]
    assert metric in Metrics().render().decode()
