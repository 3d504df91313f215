#!/usr/bin/env python3
"""Deployment files without a cluster or a Docker engine: the Kubernetes manifests parsed and
their fields that matter checked, the compose file through `docker-compose config`, and the
Dockerfile through dockerfilelint (npm; skipped where the registry cannot be reached)."""
import glob
import os
import shutil
import subprocess
import unittest

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(REPO, "deploy", "k8s")


def load_all():
    docs = {}
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            for d in yaml.safe_load_all(f):
                docs[d["kind"]] = d
    return docs


class KubernetesTest(unittest.TestCase):
    def setUp(self):
        self.docs = load_all()

    def test_kinds(self):
        self.assertEqual(sorted(self.docs), ["Deployment", "HorizontalPodAutoscaler",
                                             "PodDisruptionBudget", "Service"])

    def test_deployment(self):
        d = self.docs["Deployment"]
        labels = d["spec"]["selector"]["matchLabels"]
        self.assertEqual(d["spec"]["template"]["metadata"]["labels"], labels)
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], 1)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {"grpc": 50051, "metrics": 9450})
        self.assertEqual(c["livenessProbe"]["grpc"]["port"], 50051)
        self.assertEqual(c["readinessProbe"]["grpc"],
                         {"port": 50051, "service": "tensorcompute.v1.TensorService"})
        # The pod outlives the server's drain.
        grace = [a for a in c["args"] if a.startswith("--shutdown_grace_seconds=")]
        self.assertEqual(len(grace), 1)
        self.assertGreater(pod["terminationGracePeriodSeconds"], int(grace[0].split("=")[1]))
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])

    def test_service_is_headless_and_selects_the_pods(self):
        s = self.docs["Service"]
        self.assertEqual(s["spec"]["clusterIP"], "None")
        self.assertEqual(s["spec"]["selector"],
                         self.docs["Deployment"]["spec"]["selector"]["matchLabels"])
        self.assertIn(50051, [p["port"] for p in s["spec"]["ports"]])

    def test_hpa_and_pdb(self):
        h = self.docs["HorizontalPodAutoscaler"]
        self.assertEqual(h["apiVersion"], "autoscaling/v2")
        self.assertEqual(h["spec"]["scaleTargetRef"]["name"], "tensorcompute")
        self.assertGreaterEqual(h["spec"]["minReplicas"], 2)
        self.assertGreater(h["spec"]["maxReplicas"], h["spec"]["minReplicas"])
        p = self.docs["PodDisruptionBudget"]
        self.assertEqual(p["apiVersion"], "policy/v1")
        self.assertEqual(p["spec"]["selector"]["matchLabels"],
                         self.docs["Deployment"]["spec"]["selector"]["matchLabels"])
        self.assertLess(p["spec"]["minAvailable"], h["spec"]["minReplicas"])


class ComposeAndDockerfileTest(unittest.TestCase):
    def test_compose_config(self):
        compose = shutil.which("docker-compose")
        if compose is None:
            self.skipTest("docker-compose is not installed")
        f = os.path.join(REPO, "deploy", "docker-compose.yml")
        out = subprocess.run([compose, "-f", f, "--profile", "cpu", "--profile", "grafana",
                              "config"], capture_output=True, text=True, check=True).stdout
        config = yaml.safe_load(out)
        services = config["services"]
        self.assertEqual(sorted(services),
                         ["grafana", "prometheus", "tensorcompute", "tensorcompute-cpu"])
        gpu = services["tensorcompute"]["deploy"]["resources"]["reservations"]["devices"][0]
        self.assertEqual(gpu["driver"], "nvidia")
        for name in ("tensorcompute", "tensorcompute-cpu"):
            s = services[name]
            self.assertIn("healthcheck", s)
            self.assertEqual(s["restart"], "unless-stopped")
            # Published on 127.0.0.1 unless TENSORCOMPUTE_PUBLISH_ADDRESS says otherwise
            # (docker-compose writes such ports as "127.0.0.1:9450:9450/tcp").
            ports = [p.split("/")[0].split(":") for p in s["ports"]]
            self.assertIn("9450", [p[-1] for p in ports])
            self.assertEqual({p[0] for p in ports}, {"127.0.0.1"})
        with open(os.path.join(REPO, "deploy", "prometheus", "prometheus.yml")) as f:
            targets = yaml.safe_load(f)["scrape_configs"][0]["static_configs"][0]["targets"]
        self.assertIn("tensorcompute:9450", targets)
        import json
        with open(os.path.join(REPO, "deploy", "grafana", "dashboards", "tensorcompute.json")) as f:
            dash = json.load(f)
        exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
        for metric in ("tensorcompute_requests_total", "tensorcompute_request_duration_seconds",
                       "tensorcompute_device_memory_in_use_bytes", "tensorcompute_resident_tensors"):
            self.assertIn(metric, exprs)

    def test_dockerfile_lint(self):
        lint = os.path.join(REPO, "deploy", "lint")
        binary = os.path.join(lint, "node_modules", ".bin", "dockerfilelint")
        if not os.path.exists(binary):
            if shutil.which("npm") is None:
                self.skipTest("npm is not installed")
            r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=lint,
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                self.skipTest("npm ci failed (is the npm registry reachable?): " + r.stderr[-500:])
        r = subprocess.run([binary, os.path.join(REPO, "Dockerfile")], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
