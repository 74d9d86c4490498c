"""Task types (mirage/mpk/layers/__init__.py): every layer module's TASK_TYPE is MPK's TaskType number
(100-899) or one of the mirage-mpk extension range (1000-1999), and no two layer modules share one.

task_type_of checks every module whenever it is asked for one kind, so a collision fails the first
compile with a message naming both modules; the negative controls feed check_task_types the
collisions and out-of-range numbers a new layer module could bring. Run: pytest tests/unit/test_task_types.py
"""
import pytest

from mirage.mpk import layers


def test_every_layer_task_type_is_unique_and_in_range():
    types = {stem: layers.task_type_of(stem) for stem in layers.layer_stems()}
    assert len(types) >= 8 and len(set(types.values())) == len(types), types
    assert all(n in layers.MPK_TASK_TYPES or n in layers.EXTENSION_TASK_TYPES for n in types.values()), types
    print(f"TASK_TYPES {types} unique, in range PASS")


def test_a_collision_names_both_modules():
    with pytest.raises(ValueError) as e:
        layers.check_task_types({"rmsnorm": 119, "layernorm": 1000, "mynorm": 1000})
    assert "layers/layernorm.py and layers/mynorm.py both declare TASK_TYPE = 1000" in str(e.value)
    assert "next free extension number, 1001" in str(e.value)
    with pytest.raises(ValueError, match="layers/rmsnorm.py and layers/zeta.py both declare TASK_TYPE = 119"):
        layers.check_task_types({"rmsnorm": 119, "zeta": 119})


@pytest.mark.parametrize("bad", [99, 900, 999, 2000, "1000", 1000.0, True, None])
def test_an_out_of_range_number_names_the_module_and_the_ranges(bad):
    with pytest.raises(ValueError) as e:
        layers.check_task_types({"rmsnorm": 119, "mynorm": bad})
    msg = str(e.value)
    assert msg.startswith("layers/mynorm.py ") and "(100-899)" in msg and "(range 1000-1999)" in msg, msg
    assert "next free mirage-mpk extension number, 1000" in msg, msg


def test_next_free_extension_number():
    assert layers.next_free_task_type([119, 120]) == 1000
    assert layers.next_free_task_type([119, 1000, 1002, "x"]) == 1001
