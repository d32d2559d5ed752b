

def test_reading_another_kind_of_file_says_so_not_that_it_is_newer(tmp_path):
    """A prepare.json (schema 2) given for an fx_nodes.json (schema 1) said it was written by a newer ytk, and then
    that its schema_version was newer, ending in '?.' once the CLI closed the line."""
    import pytest

    from ytk_hookspecs.models import ArtifactError, FxNodesFile

    p = tmp_path / "prepare.json"
    p.write_text('{"schema_version": 2, "model": "m.py", "onnx": "m.onnx"}')
    with pytest.raises(ArtifactError, match=r"not a FxNodesFile file \(it has no .*\): another kind") as e:
        FxNodesFile.read(p)
    assert "upgrade yasp-toolkit" not in str(e.value) and "newer" not in str(e.value) and "?" not in str(e.value)
    p.write_text('{"schema_version": 99}')
    with pytest.raises(ArtifactError):
        FxNodesFile.read(p)
