"""The packaged default as plain data (primuspp.config.packaged) is the packaged YAML validated by the
schema: same values, same types, same order of runs."""

from primuspp.config.loader import Overrides, load_config, run_specs, simulation_config
from primuspp.config.packaged import DEFAULT


def _typed(value):
    """`value` with each scalar paired with its type (1000 and 1000.0 differ in the JSON written)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def test_packaged_default_is_the_validated_yaml():
    validated = load_config(None)
    assert _typed(DEFAULT.dump()) == _typed(validated.model_dump())
    assert list(DEFAULT.dump()["costs"]) == list(validated.costs.model_dump())


def test_simulation_config_without_a_path_is_the_packaged_default(tmp_path):
    assert simulation_config(None) is DEFAULT
    path = tmp_path / "c.yaml"
    path.write_text("runs:\n  - algorithm: 1f1b\n")
    assert simulation_config(path).model_dump() == load_config(path).model_dump()


def test_run_specs_are_the_same_from_either_form():
    for ov in (None, Overrides(algorithms=("zbv", "1f1b")), Overrides(pp=4, micro_batches=8, vpp=2)):
        assert run_specs(DEFAULT, ov) == run_specs(load_config(None), ov)


def test_the_plain_default_mirrors_this_yaml():
    """`YAML_SHA256` names the packaged file `DEFAULT` mirrors; update both together."""
    import hashlib
    from importlib import resources

    from primuspp.config.packaged import YAML_SHA256

    text = resources.files("primuspp.configs").joinpath("pp_simulation.yaml").read_bytes()
    assert hashlib.sha256(text).hexdigest() == YAML_SHA256


def test_an_edited_packaged_yaml_is_parsed_not_ignored(monkeypatch):
    """Where the installed YAML is not the one `DEFAULT` mirrors, the default comes from the file itself."""
    from primuspp.config import loader

    monkeypatch.setattr(loader, "YAML_SHA256", "0" * 64)
    cfg = simulation_config(None)
    assert cfg is not DEFAULT
    assert cfg.model_dump() == load_config(None).model_dump()
