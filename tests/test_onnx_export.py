"""An ONNX export kept beside its weights: read back, made again only when what it
depends on changes, and never left half-written."""

from pathlib import Path

from parley.models.onnx_export import kept_export


def test_an_export_is_kept_read_back_and_made_again_when_its_inputs_change(tmp_path, monkeypatch):
    exports: list[bytes] = []

    def export(content: bytes):
        def make() -> bytes:
            exports.append(content)
            return content

        return make

    first = kept_export(tmp_path, "net", [b"weights", b"code"], export(b"exported"))
    (kept,) = tmp_path.glob("net-*.onnx")
    assert first == kept.read_bytes() == b"exported" and len(exports) == 1
    # the next load reads the kept file, whatever the export would make now
    assert kept_export(tmp_path, "net", [b"weights", b"code"], export(b"other")) == b"exported"
    assert len(exports) == 1
    # changed weights or code are exported again, under a name of their own
    assert kept_export(tmp_path, "net", [b"weights", b"code 2"], export(b"new")) == b"new"
    assert len(exports) == 2 and len(list(tmp_path.glob("net-*.onnx"))) == 2
    # a directory that cannot be written still loads, and keeps nothing half-written
    monkeypatch.setattr(Path, "replace", lambda self, target: (_ for _ in ()).throw(OSError()))
    assert kept_export(tmp_path, "net", [b"weights 3"], export(b"unkept")) == b"unkept"
    assert len(list(tmp_path.glob("net-*.onnx"))) == 2 and not list(tmp_path.glob("*.partial"))


def test_exports_of_older_inputs_are_deleted_but_the_latest(tmp_path):
    """A new export keeps the one before it (a server of the version before may share the
    directory) and deletes older ones; other files, and another network's, stay."""
    import os

    for k in range(3):
        kept_export(tmp_path, "net", [b"weights", bytes([k])], lambda: b"x")
        latest = max(tmp_path.glob("net-*.onnx"), key=lambda p: p.stat().st_mtime_ns)
        os.utime(latest, (k + 1, k + 1))  # made in that order, a second apart
    second = latest
    for name in ("net-notes.txt", "network-0123456789abcdef.onnx"):
        (tmp_path / name).write_bytes(b"keep me")
    kept_export(tmp_path, "net", [b"weights", b"new"], lambda: b"new")
    exports = sorted(tmp_path.glob("net-*.onnx"))
    assert len(exports) == 2 and second in exports, exports
    assert (tmp_path / "net-notes.txt").exists()
    assert (tmp_path / "network-0123456789abcdef.onnx").exists()


def test_an_exports_name_tells_its_inputs_apart(tmp_path):
    """Each input is digested on its own, so moving a byte from one to the next changes
    the name."""
    kept_export(tmp_path, "net", [b"ab", b"c"], lambda: b"x")
    kept_export(tmp_path, "net", [b"a", b"bc"], lambda: b"x")
    assert len(list(tmp_path.glob("net-*.onnx"))) == 2
