"""Nodes (zerolab.crew.topology): the arithmetic of torchrun's layout, a crew with virtual nodes
(4 ranks as 2 nodes of 2: the node and cross-node groups sum what they should, the ledger files
each call as intra- or inter-node), a bad ``nodes`` refused, and the real topology under two
torchrun agents on localhost (``--nnodes 2``).
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import psutil
import pytest
import torch
import torch.distributed as dist

import zerolab
from zerolab.comm import Comm, Ledger, ring_all_reduce
from zerolab.crew.topology import Topology, current

PY = sys.executable


# ----------------------------------------------------------------------------- arithmetic

def test_topology_arithmetic():
    t = Topology(8, 4)
    assert t.nodes == 2
    assert [t.node_of(r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [t.local_rank(r) for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert t.same_node([4, 7]) and not t.same_node([3, 4]) and t.same_node([])
    t3 = Topology(6, 2)
    assert t3.nodes == 3 and t3.node_of(5) == 2 and t3.node_of(3) == 1 and t3.local_rank(3) == 1
    one = Topology(3, 3)
    assert one.nodes == 1 and one.same_node([0, 1, 2])
    with pytest.raises(ValueError, match="divides world_size=4"):
        Topology(4, 3)
    with pytest.raises(ValueError, match="rank 8"):
        t.node_of(8)


def test_current_reads_torchruns_variables(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "6")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert current() == Topology(6, 3)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert current() == Topology(6, 6)                      # absent: one node
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(RuntimeError, match="LOCAL_WORLD_SIZE=4"):
        current()


@pytest.mark.parametrize("nodes", [3, 0, 2.0, True])
def test_a_bad_nodes_is_refused(nodes):
    with pytest.raises(ValueError, match=r"Crew\(nodes=.*divides world_size=4"):
        zerolab.Crew(4, nodes=nodes)


# ----------------------------------------------------------------------------- 4 ranks as 2x2

def _groups_2x2():
    r = dist.get_rank()
    comm = Comm()
    env = {k: os.environ[k] for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")}
    node, cross, sub2, sub4 = comm.node_comm(), comm.cross_comm(), comm.sub_comm(2), comm.sub_comm(4)
    x = torch.tensor([float(r)])
    out = {"env": env, "topo": current(), "info_local": zerolab.rank_info().local_rank,
           "node": node.all_reduce(x.clone(), tag="n").item(),
           "cross": cross.all_reduce(x.clone(), tag="c").item(),
           "world": comm.all_reduce(x.clone(), tag="w").item(),
           "sub2": sub2.all_reduce(x.clone(), tag="s").item(),
           "sub4_is_self": sub4 is comm, "cached": comm.node_comm() is node and comm.sub_comm(2) is sub2,
           "ranks": (node.global_ranks(), cross.global_ranks(), sub2.global_ranks())}
    gathered = torch.empty(4 * 2)
    node.all_gather(gathered[:4], torch.tensor([float(r), 1.0]), tag="g")   # 2 ranks x 2 elements
    out["links"] = [(rec.tag, rec.link) for rec in comm.ledger.records]
    out["by_link"] = comm.ledger.by_link()
    out["table"] = comm.ledger.table()
    led = Ledger()
    ring_all_reduce(torch.ones(8), ledger=led)
    out["ring_links"] = sorted({(rec.op, rec.link) for rec in led.records})
    return out


@pytest.mark.timeout(60)
def test_four_ranks_as_two_nodes_of_two():
    res = zerolab.launch(_groups_2x2, 4, backend="gloo", nodes=2, timeout=50)
    for r, got in enumerate(res):
        node, local = r // 2, r % 2
        assert got["env"] == {"LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": str(node)}
        assert got["topo"] == Topology(4, 2) and got["info_local"] == local
        assert got["node"] == [1.0, 5.0][node]              # 0+1, 2+3
        assert got["cross"] == [2.0, 4.0][local]            # 0+2, 1+3
        assert got["world"] == 6.0 and got["sub2"] == got["node"]
        assert got["sub4_is_self"] and got["cached"]
        assert got["ranks"] == ([2 * node, 2 * node + 1], [local, local + 2], [2 * node, 2 * node + 1])
        assert got["links"] == [("n", "intra"), ("c", "inter"), ("w", "inter"), ("s", "intra"), ("g", "intra")]
        # all-reduce of 4 bytes: 2(N-1)/N * 4 = 4 on 2 ranks, 6 on 4; the all-gather of 16: (1/2) * 16 = 8
        assert got["by_link"] == {"intra": 4.0 + 4.0 + 8.0, "inter": 4.0 + 6.0}
        head, *rows = got["table"].splitlines()
        assert "intra-node" in head and "inter-node" in head
        ar = next(line for line in rows if line.startswith("all_reduce")).split()
        assert ar[1:] == ["4", "4", "16", "18", "8", "10"]  # calls, elements, bytes, wire, intra, inter
        # a ring step is inter-node when the neighbour is on another node: ranks 1 and 3 send
        # across (to 2 and 0), ranks 0 and 2 receive from across
        sends = "inter" if local == 1 else "intra"
        recvs = "inter" if local == 0 else "intra"
        assert got["ring_links"] == sorted({("send", sends), ("recv", recvs)})


def _one_node():
    comm = Comm()
    comm.all_reduce(torch.ones(3), tag="x")
    return comm.ledger.records[0].link, comm.ledger.table(), os.environ["LOCAL_WORLD_SIZE"], current().nodes


@pytest.mark.timeout(60)
def test_one_node_is_todays_crew():
    for link, table, lws, nodes in zerolab.launch(_one_node, 2, backend="gloo", timeout=50):
        assert (link, lws, nodes) == ("intra", "2", 1)
        assert "intra-node" not in table                   # the table is today's with one node


# ----------------------------------------------------------------------------- torchrun, 2 agents

TORCHRUN_NODES_SCRIPT = """
import os, torch, torch.distributed as dist
import zerolab
from zerolab.comm import Comm
from zerolab.crew.topology import current

def fn():
    comm = Comm()
    node = comm.node_comm()
    t = torch.tensor([float(dist.get_rank())])
    node.all_reduce(t, tag="node")
    comm.all_reduce(torch.ones(1), tag="world")
    return (dist.get_rank(), current().nodes, current().ranks_per_node, int(os.environ["GROUP_RANK"]),
            t.item(), [(r.tag, r.link) for r in comm.ledger.records])

res = zerolab.launch(fn, 4, backend="gloo")
if dist.get_rank() == 0:
    print("RESULT", res, flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_tree(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            root = psutil.Process(p.pid)
            for q in root.children(recursive=True)[::-1] + [root]:
                q.kill()
        except psutil.NoSuchProcess:
            pass
    p.communicate(timeout=30)


@pytest.mark.timeout(240)
def test_two_torchrun_agents_on_localhost(tmp_path):
    """The real topology: two torchrun agents (``--nnodes 2 --nproc-per-node 2``, rendezvous c10d
    on localhost, ``--node-rank 0`` and ``1``) start 4 ranks; each reads 2 nodes of 2 from torchrun's
    variables, and a node all-reduce sums its node's ranks only. Two agents and four ranks import
    torch on this machine's cores: about 20-60 s on 2 cores."""
    script = tmp_path / "nodes.py"
    script.write_text(TORCHRUN_NODES_SCRIPT)
    port = _free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PET_LOG_DIR=str(tmp_path / "torchrun-logs"), PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(zerolab.__file__)), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([PY, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
                               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"localhost:{port}",
                               "--node-rank", str(i), "--max-restarts", "0", str(script)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              start_new_session=True) for i in range(2)]
    try:
        outs = [p.communicate(timeout=200) for p in procs]
    finally:
        for p in procs:
            _kill_tree(p)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
    text = "".join(o for o, _ in outs)
    m = re.search(r"RESULT (.*)", text)
    assert m, text
    res = eval(m.group(1))
    assert sorted(r[0] for r in res) == [0, 1, 2, 3]
    for rank, nodes, per_node, group_rank, node_sum, links in res:
        assert (nodes, per_node) == (2, 2)
        # with c10d rendezvous torchrun assigns the nodes; ranks stay contiguous per node
        assert group_rank == rank // 2
        assert node_sum == [1.0, 5.0][rank // 2]
        assert links == [("node", "intra"), ("world", "inter")]
