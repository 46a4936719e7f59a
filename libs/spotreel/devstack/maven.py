"""Fetch the servers' runtime jars from Maven Central into the cache dir, once per pinned version."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from spotreel.platform.errors import InfraError
from spotreel.devstack.render import render, write_if_changed
from spotreel.devstack.settings import launcher_settings
from spotreel.config.settings import Settings

# An explicit plugin version: Maven 3.8.7 would otherwise resolve an old one without includeScope fixes.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
FETCH_TIMEOUT_S = 1200

_NETWORK_SIGNS = (
    "UnknownHostException",
    "Connection refused",
    "connect timed out",
    "Connect timed out",
    "Network is unreachable",
    "No route to host",
    "Could not transfer",
    "transfer failed",
    "Read timed out",
)


@dataclass(frozen=True)
class Bundle:
    """The runtime classpath of one server: a few Maven coordinates and everything they need at runtime."""

    name: str
    version: str
    coordinates: tuple[str, ...]  # group:artifact:version

    def root(self, settings: Settings) -> Path:
        return settings.cache_dir / "maven" / f"{self.name}-{self.version}"

    def lib(self, settings: Settings) -> Path:
        return self.root(settings) / "lib"

    def marker(self, settings: Settings) -> Path:
        return self.root(settings) / "fetched.json"

    def cached_jars(self, settings: Settings) -> list[Path] | None:
        """The jars of a complete earlier fetch of exactly these coordinates, else None."""
        try:
            marker = json.loads(self.marker(settings).read_text())
        except (OSError, ValueError):
            return None
        if marker.get("coordinates") != list(self.coordinates):
            return None
        jars = [self.lib(settings) / name for name in marker.get("jars", [])]
        if not jars or not all(j.is_file() for j in jars):
            return None
        return jars

    def jar(self, settings: Settings, prefix: str) -> Path:
        for j in self.cached_jars(settings) or []:
            if j.name.startswith(prefix) and j.name.endswith(".jar"):
                return j
        raise InfraError(f"{self.name}: {prefix}*.jar is missing from {self.lib(settings)}",
                         ["run `spotreel infra fetch` again"])

    def classpath(self, settings: Settings) -> str:
        # The JVM expands dir/* itself; one short argument keeps `ps` readable.
        return str(self.lib(settings) / "*")


def kafka_bundle(settings: Settings) -> Bundle:
    v = launcher_settings(settings).kafka_version
    # kafka-tools brings the slf4j -> reload4j binding that the broker only has at compile time.
    return Bundle("kafka", v, (f"org.apache.kafka:kafka_2.13:{v}", f"org.apache.kafka:kafka-tools:{v}"))


def cassandra_bundle(settings: Settings) -> Bundle:
    v = launcher_settings(settings).cassandra_version
    return Bundle("cassandra", v, (f"org.apache.cassandra:cassandra-all:{v}",))


def bundles(settings: Settings) -> list[Bundle]:
    return [kafka_bundle(settings), cassandra_bundle(settings)]


def render_pom(bundle: Bundle, repo_url: str = "") -> str:
    deps = []
    for coord in bundle.coordinates:
        group, artifact, version = coord.split(":")
        deps.append(
            "    <dependency>"
            f"<groupId>{group}</groupId><artifactId>{artifact}</artifactId><version>{version}</version>"
            "</dependency>"
        )
    repositories = ""
    if repo_url:
        # Same id as Maven's built-in "central" so this URL replaces it for artifacts and plugins alike.
        repo = f"<id>central</id><url>{repo_url}</url>"
        repositories = (
            f"  <repositories><repository>{repo}</repository></repositories>\n"
            f"  <pluginRepositories><pluginRepository>{repo}</pluginRepository></pluginRepositories>"
        )
    return render("pom.xml", artifact=f"{bundle.name}-runtime", version=bundle.version,
                  repositories=repositories, dependencies="\n".join(deps))


def fetch(settings: Settings, say: Callable[[str], None] = print, *, report_cached: bool = True,
          ) -> dict[str, list[Path]]:
    """Make sure every bundle's jars are in the cache; a second run only reads the markers."""
    out: dict[str, list[Path]] = {}
    for bundle in bundles(settings):
        jars = bundle.cached_jars(settings)
        if jars is None:
            t0 = time.monotonic()
            say(f"fetch: downloading {bundle.name} {bundle.version} from Maven ({', '.join(bundle.coordinates)})")
            jars = _download(settings, bundle)
            say(f"fetch: {bundle.name} {bundle.version}: {len(jars)} jars in {time.monotonic() - t0:.1f} s")
        elif report_cached:
            say(f"fetch: {bundle.name} {bundle.version}: {len(jars)} jars already in {bundle.lib(settings)}")
        out[bundle.name] = jars
    return out


def _download(settings: Settings, bundle: Bundle) -> list[Path]:
    settings = launcher_settings(settings)
    root = bundle.root(settings)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InfraError(f"fetch: cache directory {root} is not writable ({exc.strerror})",
                         ["set SPOTREEL_CACHE_DIR to a writable directory"]) from None
    mvn = shutil.which(settings.maven_bin)
    if mvn is None:
        raise InfraError(f"fetch: Maven not found ({settings.maven_bin!r} is not on PATH)",
                         ["install Maven 3.8+ (Debian: apt-get install maven) or set SPOTREEL_MAVEN_BIN"])
    pom = root / "pom.xml"
    write_if_changed(pom, render_pom(bundle, settings.maven_repo_url))
    staging = root / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    log = root / "fetch.log"
    cmd = [
        mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
        f"-Dmaven.repo.local={settings.cache_dir / 'maven' / 'repository'}",
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
    ]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InfraError(f"fetch: Maven did not finish downloading {bundle.name} within {FETCH_TIMEOUT_S} s",
                         [f"log: {log}"]) from None
    log.write_text(proc.stdout)
    if proc.returncode != 0:
        raise _mvn_error(settings, bundle, proc.stdout, log)
    jars = sorted(p.name for p in staging.glob("*.jar"))
    if not jars:
        raise InfraError(f"fetch: Maven copied no jars for {bundle.name} {bundle.version}", [f"log: {log}"])
    lib = bundle.lib(settings)
    shutil.rmtree(lib, ignore_errors=True)
    staging.replace(lib)
    # Written last: a marker only ever describes a complete lib/.
    write_if_changed(bundle.marker(settings), json.dumps(
        {"bundle": bundle.name, "version": bundle.version, "coordinates": list(bundle.coordinates),
         "jars": jars}, indent=2) + "\n")
    return [lib / j for j in jars]


def _mvn_error(settings: Settings, bundle: Bundle, output: str, log: Path) -> InfraError:
    repo = launcher_settings(settings).maven_repo_url or "Maven Central"
    text = re.sub(r"\x1b\[[0-9;]*m", "", output)
    errors = [line.strip() for line in text.splitlines() if line.strip().startswith("[ERROR]")]
    detail = _shorten(errors[0].removeprefix("[ERROR]").strip() if errors else text.strip()[-300:])
    hints = [detail, f"log: {log}"]
    if any(sign in text for sign in _NETWORK_SIGNS):
        return InfraError(f"fetch: cannot reach {repo} to download {bundle.name} {bundle.version}", hints)
    if "Could not find artifact" in text or "could not be resolved" in text:
        return InfraError(f"fetch: {bundle.name} {bundle.version} could not be resolved from {repo}", hints)
    return InfraError(f"fetch: Maven failed for {bundle.name} {bundle.version}", hints)


def _shorten(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
