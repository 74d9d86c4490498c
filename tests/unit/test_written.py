"""mirage.mpk.written: poison and the written check as whole-tensor operations over the declared
region (the union of declared output tiles), and the message naming the tiles left unwritten."""
import pytest
import torch

from mirage.mpk import written
from mirage.mpk.errors import MPKUnwrittenError
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)


def compiled_identity():
    pk = PersistentKernel(test_mode=True, num_workers=2)
    x = pk.attach_input(torch.arange(16.0).reshape(4, 4), name="x")
    y = pk.attach_input(torch.zeros(4, 4), name="y")
    pk.identity_layer(x, y, (2, 2, 1), BLOCK)        # four 2x2 tiles
    pk.compile()
    return pk, y.data


def is_poison(t: torch.Tensor, w: written.Watched) -> torch.Tensor:
    return written._bits(t) == w.poison_of(w.regions[0][0])


def test_whole_tensor_poison_and_check_name_the_tile():
    pk, y = compiled_identity()
    w = written.Watched(pk.graph)
    assert len(w) == 4 and len(w.regions) == 1 and w.regions[0][1] is None     # one tensor, all of it
    w.poison()
    assert bool(is_poison(y, w).all())
    y.copy_(torch.ones(4, 4))
    w.check()                                                                   # everything written
    y[3, 1] = torch.nan                                                         # an ordinary NaN is written
    w.check()
    w.poison()
    y.copy_(torch.ones(4, 4))
    written._bits(y)[3, 1] = w.poison_of(w.regions[0][0])                       # one element never stored
    with pytest.raises(MPKUnwrittenError) as e:
        w.check()
    print(e.value)
    assert str(e.value) == ("1 output tile(s) were not written by the run:\n  layer 'identity_0' task "
                            "(0, 1, 0): 1 of 4 elements of 'y'[2:4, 0:2] unwritten")
    pk.finalize()


def test_a_partly_declared_tensor_is_poisoned_and_checked_only_where_declared():
    pk, y = compiled_identity()
    undeclared = next(t for t in pk.graph.tasks[1:] if t.coord == (1, 1, 0)).outputs[0]
    undeclared.declared = False                    # e.g. a layer writing only some rows
    w = written.Watched(pk.graph)
    mask = w.regions[0][1]
    assert len(w) == 3 and mask is not None and int(mask.sum()) == 12 and not bool(mask[2:4, 2:4].any())
    y.fill_(5.0)
    w.poison()
    assert bool(is_poison(y, w)[mask].all()) and bool((y[2:4, 2:4] == 5.0).all())   # outside: untouched
    y[mask] = 1.0
    w.check()                                      # the undeclared tile may hold anything
    written._bits(y)[2:4, 2:4] = w.poison_of(w.regions[0][0])
    w.check()
    written._bits(y)[0, 3] = w.poison_of(w.regions[0][0])
    with pytest.raises(MPKUnwrittenError, match=r"layer 'identity_0' task \(1, 0, 0\): 1 of 4 elements of "
                                                r"'y'\[0:2, 2:4\] unwritten"):
        w.check()
    pk.finalize()
