"""Where bytes live (``zerolab/memory/place.py``) and what each stage shards
(``zerolab/config/stages.py``): DeepSpeed's offload words turned into places, places that print
and compare as the names the memory report always used, and the sharding table that the
config's per-stage rules, the formulas and the engine's stage table all read."""
import pytest

from zerolab.memory import Place
from zerolab.config import keys as K
from zerolab.config.stages import (GRADS, OPTIMIZER_STATES, PARAMS, SHARDED, partitions_params, parts, shards,
                                   shards_optimizer, stages_from)
from zerolab.config.values import Bad
from zerolab.zero.params import ReplicatedParams
from zerolab.zero.stage3.gather import GatheredParams
from zerolab.zero.stage_table import STAGES


def test_place_of_reads_deepspeeds_offload_words():
    assert Place.of("none") is Place.DEVICE
    assert Place.of("cpu") is Place.HOST
    assert Place.of("nvme") is Place.NVME
    assert [p.offloaded for p in Place] == [False, True, True]
    for bad in ("device", "host", "gpu", None):     # the config's words only: a place name is not one
        with pytest.raises(ValueError, match="'none', 'cpu' or 'nvme'"):
            Place.of(bad)


def test_a_place_prints_and_compares_as_its_name():
    # the memory report's keys and every printed line stay what they were before places were a type
    for place, name in ((Place.DEVICE, "device"), (Place.HOST, "host"), (Place.NVME, "nvme")):
        assert place == name and hash(place) == hash(name)
        assert str(place) == f"{place}" == format(place) == "%s" % place == name
        assert f"{place:>6}|" == f"{name:>6}|"
        assert Place(name) is place
    assert {Place.HOST: 1}["host"] == 1 and {"host": 1}[Place.HOST] == 1
    assert str({str(Place.HOST): 1}) == "{'host': 1}"
    assert Place.HOST != "cpu"                      # the config's word is not the place's name


def test_the_sharding_table_is_the_papers():
    assert list(SHARDED) == [0, 1, 2, 3]
    assert [sorted(SHARDED[s]) for s in SHARDED] == [
        [], [OPTIMIZER_STATES], [GRADS, OPTIMIZER_STATES], [GRADS, OPTIMIZER_STATES, PARAMS]]
    assert [parts(s, GRADS, 8) for s in SHARDED] == [1, 1, 8, 8]
    assert [stages_from(s) for s in SHARDED] == [[0, 1, 2, 3], [1, 2, 3], [2, 3], [3]]


def test_the_stage_key_means_the_sharding_table():
    """The ``stage`` key's reader (DeepSpeed's 0..3) takes exactly the table's stages; the named
    facts are DeepSpeed's two tests of the stage (``zero_optimization()``: stage > 0;
    ``zero_optimization_partition_weights()``: stage 3), and ZeRO++'s keys are no-effect exactly
    where the parameters stay whole."""
    read = K.ZERO["stage"].read
    assert [s for s in range(-2, 7) if _reads(read, s)] == list(SHARDED)
    assert [shards_optimizer(s) for s in SHARDED] == [s > 0 for s in SHARDED] == [False, True, True, True]
    assert [partitions_params(s) for s in SHARDED] == [s == 3 for s in SHARDED] == [False, False, False, True]
    for s in SHARDED:
        assert (K.zero_keys(s) is K.ZERO) == partitions_params(s)
        assert K.zero_keys(s).keys() >= K.ZEROPP_BELOW_STAGE3.keys()
    assert K.zero_keys(None) is K.ZERO


def _reads(read, value) -> bool:
    try:
        return read(value) == value
    except Bad:
        return False


def test_the_stage_table_reads_the_sharding_table():
    """The engine's rows and the formulas' table agree: the same stages, and a row's switches are
    the ones its sharding asks for (sharded parameters: gathered per module; sharded optimizer
    states: the step runs on each rank's part)."""
    assert list(STAGES) == list(SHARDED)
    for s, spec in STAGES.items():
        assert spec.stage == s
        assert spec.shards_optimizer == shards(s, OPTIMIZER_STATES) == spec.zero_enabled
        assert spec.partitions_params == shards(s, PARAMS)
        assert spec.params is (GatheredParams if shards(s, PARAMS) else ReplicatedParams)
        assert spec.switches[2] == shards(s, OPTIMIZER_STATES)
