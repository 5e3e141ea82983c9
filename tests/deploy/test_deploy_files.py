"""deploy/: the files operators run, checked with real tools, since no
Kubernetes cluster, container runtime or Grafana runs where the tests do.

- deploy/k8s: parsed with a real YAML parser (PyYAML); the fields we use are
  checked against each other (Service, StatefulSet, probes, ports, volumes,
  the Secret and ConfigMap, the security context); the ConfigMap's config
  passes `smbd --check-config`; the worker Job's command runs for real
  against a real smbd.
- deploy/container/Containerfile: stages and copies are consistent, and the
  runtime stage installs (directly or through Debian's dependencies) every
  package whose libraries smbd, smbctl, smb-bench and libsmb load (ldd,
  dpkg -S, apt-cache).
- deploy/grafana: valid JSON whose queries use only metrics a real
  `smbd --metrics` serves.

Environment (CTest sets it): SMB_SOURCE_DIR, SMB_SMBD, SMB_SMBCTL,
SMB_BENCH, SMB_LIBSMB.
"""

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

try:
    import yaml
except ImportError:  # pragma: no cover
    yaml = None

SRC = os.environ.get("SMB_SOURCE_DIR", os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..")))
DEPLOY = os.path.join(SRC, "deploy")
SMBD = os.environ.get("SMB_SMBD", os.path.join(SRC, "build", "ci", "smb-server", "smbd"))
SMBCTL = os.environ.get("SMB_SMBCTL", os.path.join(SRC, "build", "ci", "tools", "smbctl"))
BENCH = os.environ.get("SMB_BENCH", os.path.join(SRC, "build", "ci", "tools", "smb-bench"))
LIBSMB = os.environ.get("SMB_LIBSMB", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", text)
    scale = {None: 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(m.group(1)) * scale[(m.group(2) or "")[:1] or None]


class Smbd:
    """One real smbd on loopback (a context manager)."""

    def __init__(self, *args):
        self.port = free_port()
        self.proc = subprocess.Popen([SMBD, "--listen", f"127.0.0.1:{self.port}", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("smbd ready on"):
            self.proc.kill()
            raise RuntimeError(f"smbd did not start: {line} {self.proc.stderr.read()}")
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.communicate(timeout=10)


@unittest.skipIf(yaml is None, "PyYAML is missing (Debian package python3-yaml)")
class KubernetesManifestsTest(unittest.TestCase):
    def setUp(self):
        self.docs = {}
        for name in sorted(os.listdir(os.path.join(DEPLOY, "k8s"))):
            with open(os.path.join(DEPLOY, "k8s", name)) as f:
                for doc in yaml.safe_load_all(f):
                    for key in ("apiVersion", "kind", "metadata"):
                        self.assertIn(key, doc, f"{name}: a document without {key}")
                    self.docs[(doc["kind"], doc["metadata"]["name"])] = doc
        self.sts = self.doc("StatefulSet", "smbd")
        self.pod = self.sts["spec"]["template"]
        self.container = self.pod["spec"]["containers"][0]
        self.ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}

    def doc(self, kind, name):
        self.assertIn((kind, name), self.docs, f"no {kind} {name} in deploy/k8s")
        return self.docs[(kind, name)]

    def volume(self, name):
        volumes = {v["name"]: v for v in self.pod["spec"]["volumes"]}
        self.assertIn(name, volumes)
        return volumes[name]

    def mount(self, volume):
        mounts = [m for m in self.container["volumeMounts"] if m["name"] == volume]
        self.assertEqual(len(mounts), 1, f"volume {volume} mounted once")
        return mounts[0]

    def config(self):
        cm = self.doc("ConfigMap", self.volume("config")["configMap"]["name"])
        self.assertEqual(self.mount("config")["subPath"], "smbd.toml")
        return cm["data"]["smbd.toml"]

    def test_the_service_names_every_server(self):
        self.assertEqual(self.sts["apiVersion"], "apps/v1")
        service = self.doc("Service", self.sts["spec"]["serviceName"])
        self.assertEqual(service["spec"]["clusterIP"], "None", "headless: a DNS name per smbd")
        labels = self.pod["metadata"]["labels"]
        for selector in (service["spec"]["selector"], self.sts["spec"]["selector"]["matchLabels"]):
            self.assertLessEqual(selector.items(), labels.items(), f"{selector} does not select the pods")
        self.assertEqual({p["name"]: p["port"] for p in service["spec"]["ports"]}, self.ports)
        anti = self.pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        self.assertEqual(anti["topologyKey"], "kubernetes.io/hostname")

    def test_probes_and_ports_match_the_config(self):
        self.assertIn(self.container["readinessProbe"]["tcpSocket"]["port"], self.ports)
        live = self.container["livenessProbe"]["httpGet"]
        self.assertEqual((live["path"], self.ports[live["port"]]), ("/metrics", self.ports["metrics"]))
        text = self.config()
        self.assertRegex(text, rf'listen = "0\.0\.0\.0:{self.ports["control"]}"')
        self.assertRegex(text, rf'metrics = "0\.0\.0\.0:{self.ports["metrics"]}"')
        annotations = self.pod["metadata"]["annotations"]
        self.assertEqual(int(annotations["prometheus.io/port"]), self.ports["metrics"])

    def test_the_config_is_valid_and_its_secret_is_mounted(self):
        text = self.config()
        token_path = re.search(r'auth-token-file = "([^"]+)"', text).group(1)
        token_mount = self.mount("token")["mountPath"]
        self.assertEqual(os.path.dirname(token_path), token_mount)
        secret = self.volume("token")["secret"]
        self.assertEqual(secret["defaultMode"], 0o400)
        with tempfile.TemporaryDirectory() as tmp:
            token = os.path.join(tmp, "token")
            with open(token, "w") as f:
                f.write("a secret\n")
            os.chmod(token, 0o600)
            config = os.path.join(tmp, "smbd.toml")
            with open(config, "w") as f:
                f.write(text.replace(token_path, token))
            r = subprocess.run([SMBD, "--check-config", config], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        capacity = parse_size(re.search(r'capacity = "([^"]+)"', text).group(1))
        resources = self.container["resources"]
        self.assertGreater(parse_size(resources["requests"]["memory"]), capacity, "room for smbd beyond the pool")
        self.assertEqual(resources["requests"]["memory"], resources["limits"]["memory"])

    def test_security_context(self):
        security = self.container["securityContext"]
        self.assertEqual(security["capabilities"]["drop"], ["ALL"])
        self.assertEqual(security["capabilities"]["add"], ["IPC_LOCK"])
        self.assertTrue(security["runAsNonRoot"])
        self.assertFalse(security["allowPrivilegeEscalation"])
        with open(os.path.join(DEPLOY, "container", "Containerfile")) as f:
            uid = re.search(r"useradd [^\n]*--uid (\d+)", f.read()).group(1)
        self.assertEqual(security["runAsUser"], int(uid), "the image's smb user")
        self.assertEqual(self.volume("shm")["emptyDir"]["medium"], "Memory")
        self.assertEqual(self.mount("shm")["mountPath"], "/dev/shm")

    def test_the_worker_job_reaches_every_server_and_runs(self):
        job = self.doc("Job", "smb-train")
        spec = job["spec"]["template"]["spec"]
        worker = spec["containers"][0]
        env = {e["name"]: e.get("value") for e in worker["env"]}
        service = self.sts["spec"]["serviceName"]
        expected = [f"smbd-{i}.{service}:{self.ports['control']}" for i in range(self.sts["spec"]["replicas"])]
        self.assertEqual(env["SMB_SERVERS"].split(","), expected)
        secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        self.assertEqual(list(secrets.values()), [self.volume("token")["secret"]["secretName"]])
        self.assertEqual(os.path.dirname(env["SMB_AUTH_TOKEN_FILE"]), worker["volumeMounts"][0]["mountPath"])
        self.assertEqual(job["spec"]["completionMode"], "Indexed")
        self.assertEqual(int(env["WORLD_SIZE"]), job["spec"]["completions"])
        self.assertEqual(worker["image"], self.container["image"])
        # The worker's own command, for real, against a real smbd (index 0).
        self.assertEqual(worker["command"], ["smb-bench"])
        args = [a.replace("$(JOB_COMPLETION_INDEX)", "0") for a in worker["args"]]
        with Smbd("--capacity", "128M") as server:
            r = subprocess.run([BENCH, *args], env={**os.environ, "SMB_SERVERS": server.address},
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, f"smb-bench {shlex.join(args)}: {r.stdout}{r.stderr}")


def dockerfile_instructions(path):
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    with open(path) as f:
        text = re.sub(r"\\\n", " ", "".join(l for l in f if not l.lstrip().startswith("#")))
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
            for line in text.splitlines() if line.strip()]


class ContainerfileTest(unittest.TestCase):
    def setUp(self):
        self.steps = dockerfile_instructions(os.path.join(DEPLOY, "container", "Containerfile"))
        self.stages = []  # [(name, [steps])]
        for op, args in self.steps:
            if op == "FROM":
                self.assertRegex(args, r"^debian:12(-slim)? AS \w+$")
                self.stages.append((args.split()[-1], []))
            else:
                self.assertTrue(self.stages, f"{op} before FROM")
                self.stages[-1][1].append((op, args))

    def test_stages_and_the_runtime_image(self):
        names = [n for n, _ in self.stages]
        self.assertEqual(names, ["build", "runtime"])
        for i, (_, steps) in enumerate(self.stages):
            for op, args in steps:
                m = re.match(r"--from=(\S+)", args)
                if op == "COPY" and m:
                    self.assertIn(m.group(1), names[:i], "copies from an earlier stage")
        runtime = dict((op, args) for op, args in self.stages[-1][1] if op in ("USER", "ENTRYPOINT", "CMD", "EXPOSE"))
        self.assertEqual(runtime["USER"], "smb")
        self.assertEqual(json.loads(runtime["ENTRYPOINT"]), ["/usr/bin/smbd"])
        self.assertEqual(json.loads(runtime["CMD"]), ["--config", "/etc/smb/smbd.toml"])
        self.assertEqual(runtime["EXPOSE"].split(), ["7000", "9470"])
        build = " ".join(args for op, args in self.stages[0][1] if op == "RUN")
        cache = os.path.join(os.path.dirname(os.path.dirname(SMBD)), "CMakeCache.txt")
        if os.path.exists(cache):
            with open(cache) as f:
                known = set(re.findall(r"^(\w+):", f.read(), re.M))
            for option in re.findall(r"-D(\w+)=", build):
                self.assertTrue(option.startswith("CMAKE_") or option in known, f"-D{option}: no such option")

    def apt_packages(self, stage):
        run = " ".join(args for op, args in stage[1] if op == "RUN")
        m = re.search(r"apt-get install -y --no-install-recommends (.*?)(&&|$)", run)
        return m.group(1).split()

    def test_the_runtime_stage_installs_every_library_the_programs_load(self):
        listed = self.apt_packages(self.stages[-1])
        r = subprocess.run(["apt-cache", "show", "--no-all-versions", *listed], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, f"not Debian packages: {r.stderr}")
        closure = set(listed)
        r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                            "--no-breaks", "--no-replaces", "--no-enhances", *listed],
                           capture_output=True, text=True, check=True)
        closure |= {m.group(1).split(":")[0] for m in re.finditer(r"Depends: <?([^\s>]+)>?", r.stdout)}
        programs = [SMBD, SMBCTL, BENCH] + ([LIBSMB] if LIBSMB else [])
        needed = set()
        for program in programs:
            out = subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
            for path in re.findall(r"=> (/\S+)", out):
                if "/cuda" in path or "libsmb.so" in path or path.startswith(os.path.dirname(os.path.dirname(SMBD))):
                    continue  # the image builds without CUDA; libsmb is the image's own
                owner = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
                if owner.returncode != 0:
                    owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
                self.assertEqual(owner.returncode, 0, f"{path} ({program}) belongs to no package")
                needed.add(owner.stdout.split(":")[0])
        # What every Debian image has, slim included: the required packages,
        # apt, and what they depend on.
        installed = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Priority}\n"], capture_output=True,
                                   text=True, check=True).stdout.split("\n")
        base = ["apt"] + [line.split()[0] for line in installed if line.endswith(" required")]
        r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                            "--no-breaks", "--no-replaces", "--no-enhances", "--installed", *base],
                           capture_output=True, text=True, check=True)
        essential = set(base) | {m.group(1).split(":")[0] for m in re.finditer(r"Depends: <?([^\s>]+)>?", r.stdout)}
        self.assertEqual(needed - closure - essential, set(),
                         "libraries the programs load that the runtime stage does not install")


class GrafanaDashboardTest(unittest.TestCase):
    def test_queries_use_only_metrics_smbd_serves(self):
        with open(os.path.join(DEPLOY, "grafana", "smbd-dashboard.json")) as f:
            dashboard = json.load(f)
        metrics_port = free_port()
        with Smbd("--capacity", "64M", "--metrics", f"127.0.0.1:{metrics_port}") as server:
            # Traffic first: a family shows once it has a series (an error,
            # a buffer, a vector op).
            subprocess.run([SMBCTL, "--servers", server.address, "info", "no-such-buffer"], capture_output=True)
            subprocess.run([BENCH, "--servers", server.address, "--op", "accumulate", "--size", "1M", "--keep",
                            "--name", "grafana"], capture_output=True, check=True, timeout=60)
            deadline = time.monotonic() + 10
            while True:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
                    text = response.read().decode()
                if "smb_buffer_bytes{" in text or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        served = set()
        for name, kind in re.findall(r"^# TYPE (\w+) (\w+)", text, re.M):
            served.add(name)
            if kind == "histogram":
                served |= {name + "_bucket", name + "_sum", name + "_count"}
        variables = {v["name"] for v in dashboard["templating"]["list"]}
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids are unique")
        for panel in dashboard["panels"]:
            grid = panel["gridPos"]
            self.assertLessEqual(grid["x"] + grid["w"], 24, panel["title"])
            self.assertTrue(panel["targets"], panel["title"])
            for target in panel["targets"]:
                expr = target["expr"]
                self.assertEqual(expr.count("("), expr.count(")"), expr)
                for metric in re.findall(r"\bsmb_\w+", expr):
                    self.assertIn(metric, served, f"panel '{panel['title']}' queries {metric}, which smbd does not serve")
                for variable in re.findall(r"\$(\w+)", expr):
                    self.assertTrue(variable in variables or variable.startswith("__"), f"${variable} is not defined")


if __name__ == "__main__":
    unittest.main(verbosity=2)
