# %% [markdown] id="ex08c-00"
# # Exercise 8c · Borrow, return, borrow again: stage 3's gathers as module hooks
#
# At stage 3 no worker owns a whole piece of furniture: each keeps a 1/N slice of every piece
# (the **parameters**). Before the crew works on a room (a module's **forward**), they borrow that
# room's furniture from everyone and assemble it (an **all-gather**); when they leave the room
# they give it back (**release**: only the slice stays). On the way back through the house (the
# **backward**), a room's work is undone, and for that the furniture must be assembled **again**,
# before the crew reaches the room.
#
# Chapter 8 tuned *how much* is borrowed ahead. Here you write *when*: the hooks that zerolab's
# stage 3 installs on every module. They are DeepSpeed's design (`DeepSpeedZeRoOffload` in
# `deepspeed/runtime/zero/parameter_offload.py`: a forward pre-hook fetches a module's
# parameters, a forward hook releases them and wraps the outputs so that their first gradient
# fetches them again, a hook on the inputs releases them after the module's backward;
# `ZeROOrderedDict` catches a parameter read outside its own module). zerolab's
# copy is `zerolab/zero/stage3/hooks.py` (`ModuleHooks`); the check runs **your** class in its place,
# inside the real engine, and compares every gather and release with zerolab's.
#
# **When the check fails** it says in a few lines what is wrong and names the likely mistake; for
# the full traceback run `import zerolab.course.checks; zerolab.course.checks.full_tracebacks()` and run the
# check cell again.

# %% [markdown] id="ex08c-01"
# ## What the engine gives you, what you decide
#
# `params` is the engine's `GatheredParams` (`zerolab/zero/stage3/gather.py`). A **group** is one parameter's
# partition, as DeepSpeed partitions them (its `ds_tensor`: `params.groups[i]`, the parameter's name
# in `.label`). You call:
#
# | call | what it does |
# |---|---|
# | `params.module_groups.get(module, [])` | the indices of the groups `module` owns (its own, not its children's) |
# | `params.unshard_unit(ids, module)` | `module` is fetched (an event of the trace): gather the groups `ids` that are not gathered, in **one** all-gather (a module's unit) |
# | `params.top_up(module)` | a module with no parameters of its own is fetched: still an event of the trace (DeepSpeed's `fetch_sub_module` runs for every module) |
# | `params.unshard(group)` | the same for one group |
# | `params.after_forward(group)` | a module using it finished its forward: release it (unless the reuse distance keeps it) |
# | `params.after_backward(ids)` | a module finished its backward: release those groups (unless the reuse distance keeps them) |
# | `params.start_forward_pass()` / `params.end_forward_pass()` | the outermost module's forward begins / returned |
# | `params.begin_backward()` | the first gradient reached a module's output: backward has begun |
# | `params.in_backward`, `params.full` | in backward?; the indices of the groups gathered now |
#
# Given, as plumbing: `watch_params(hooks, params)` makes every module's parameter dict call
# `hooks.on_param_read(p, name)` when a parameter is read by attribute (`module.weight`), and
# `on_first_output_grad(output, fn)` runs `fn()` once, when the first gradient reaches any tensor
# of `output`: just before that module's backward; `on_inputs_grad(inputs, fn)` runs `fn()` once
# the gradients of all of a module's inputs are computed: just after its backward. The engine
# releases a group itself once its gradient is reduced, and everything at the end of backward.
# Given too, `fetch_ids(module)`: what a fetch of `module` gathers now. The engine records the
# step's module fetches as a **trace** (DeepSpeed's `PartitionedParameterCoordinator`) and from
# the next step on its release rule, `stage3_max_reuse_distance`, reads that trace: it keeps a
# group that the trace says is used again soon. So every module's fetch, forward and backward,
# with parameters or without, must be an event (pass `module`).
#
# You write three methods. Two cases need thought:
#
# - **a shared (tied) weight**: the model's output layer uses the embedding's weight. Both
#   modules list that group; it is gathered for each and released after each, in forward and
#   in backward alike, and never gathered twice while it is gathered;
# - **a weight read outside its module**: `nn.MultiheadAttention` computes with
#   `self.out_proj.weight` without calling `out_proj`, and a model may compute
#   `F.linear(h, self.mix.weight)` in its own forward. Gather it when it is read, and tie it for
#   good to the module whose forward read it (`self.registered`): from then on it belongs to that
#   module's unit, gathered with the module's own groups in one all-gather, before its forward and
#   before its backward, and released after each.

# %% id="ex08c-02"
import torch

import zerolab
from zerolab.course.checks import hooks3                    # the check's model, a run on the ranks
from zerolab.zero.stage3.hooks import on_first_output_grad, on_inputs_grad, unwatch_params, watch_params

# %% id="ex08c-03"
class MyHooks:
    # Stage 3's module hooks: when to gather a module's parameters, when to release them.

    def __init__(self, params):
        self.params = params                     # the engine's GatheredParams
        self.frames = []                         # forwards running now: [module, extra group ids]
        self.registered = {}                     # module -> group ids (register_external_parameter)
        self.handles = []
        for m in params.model.modules():
            self.handles.append(m.register_forward_pre_hook(self.pre_forward))
            self.handles.append(m.register_forward_hook(self.post_forward))
        self.watched = watch_params(self, params)    # reading module.weight calls on_param_read

    def remove(self):
        for h in self.handles:
            h.remove()
        unwatch_params(self.watched)

    def register_external_parameter(self, module, param):
        g = self.params.unit_of[id(param)]
        if not self.params.persistent[g.index]:
            self.registered.setdefault(module, set()).add(g.index)

    def fetch_ids(self, module):                 # what a fetch of module gathers now (the trace asks)
        return self.params.module_groups.get(module, []) + sorted(self.registered.get(module, ()))

    def pre_backward(self):                      # (a forward that raised leaves frames behind)
        self.frames.clear()

    post_backward = forward_failed = pre_backward

    def pre_forward(self, module, inputs):
        ps = self.params
        # BEGIN SOLUTION: a pass begins at the outermost module; a frame; gather the unit
        if not self.frames and not ps.in_backward:
            ps.start_forward_pass()              # the outermost module: a new forward pass
        frame = [module, sorted(self.registered.get(module, ()))]
        self.frames.append(frame)
        ids = ps.module_groups.get(module, []) + frame[1]
        if ids:
            ps.unshard_unit(ids, module)         # its own groups and those tied to it: one call
            if torch.is_grad_enabled():          # after its backward: release them
                on_inputs_grad(inputs, lambda: ps.after_backward(ps.module_groups.get(module, []) + frame[1]))
        else:
            ps.top_up(module)                    # no parameters: still a fetch (an event of the trace)
        # END SOLUTION

    def post_forward(self, module, inputs, output):
        ps = self.params
        # BEGIN SOLUTION: close the frame, release, end the pass; gather again before backward
        _, extra = self.frames.pop()
        ids = ps.module_groups.get(module, []) + extra
        if not ps.in_backward:                   # (backward's recomputation keeps them)
            for i in ids:
                ps.after_forward(ps.groups[i])   # release, unless the reuse distance keeps it
            if not self.frames:
                ps.end_forward_pass()

        def before_backward():                   # the module's backward is next: gather again
            ps.begin_backward()
            ps.unshard_unit(ids, module)         # (no parameters: still an event of the trace)
        if torch.is_grad_enabled():
            on_first_output_grad(output, before_backward)
        # END SOLUTION
        return output

    def on_param_read(self, p, name):
        ps = self.params
        g = ps.unit_of.get(id(p))
        if g is None or ps.persistent[g.index]:
            return
        # BEGIN SOLUTION: read in a forward, not gathered: gather it, tie it to that module
        if self.frames and g.index not in ps.full:   # read in some forward, not its own module's
            module, extra = self.frames[-1]
            self.registered.setdefault(module, set()).add(g.index)   # its unit from now on
            ps.unshard(g)
            extra.append(g.index)                # released (and re-gathered) with that module
        # END SOLUTION

# %% [markdown] id="ex08c-04"
# ## Two steps on 2 ranks
#
# The check's model (`hooks3.HooksNet`, 2,928 parameters) is an embedding, a multi-head attention,
# an MLP, a weight `mix` that only the root's forward uses, and an output layer tied to the
# embedding. The engine runs stage 3 in fp32 with every parameter gathered
# (`stage3_param_persistence_threshold` 0), nothing kept across the turn
# (`stage3_max_reuse_distance` 0) and no prefetch, so that each gather is the one your hooks ask
# for. `two_steps(MyHooks)` trains two steps with your class as the engine's hooks
# (`zerolab.zero.stage3.hooks.use_module_hooks`, zerolab's own seam) and logs each gather (+) and release (−).
#
# **Predict, then run.** The model has 10 groups, one per parameter (`embed.weight`, the
# attention's `in_proj_weight`, `in_proj_bias`, `out_proj.weight`, `out_proj.bias`, the MLP's two
# weights and two biases, `mix.weight`; the output layer has no parameter of its own). How many parameter all-gathers
# does the first step make, forward and backward? And the second, once the weights read outside
# their module are tied? Which group is gathered most often? Write your guesses down.

# %% id="ex08c-05"
crew, kept = zerolab.Crew(2), {}


def two_steps(hooks_class):
    # Two steps on the 2 ranks with hooks_class as the engine's hooks (run once, then kept).
    if hooks_class not in kept:
        kept[hooks_class] = hooks3.trial(crew, hooks_class, steps=2)
    return kept[hooks_class]


run = two_steps(MyHooks)
for step, calls in enumerate(run["per_step"], 1):
    print(f"step {step}: {len(calls)} all-gathers")
    print("\n".join(hooks3.summary(run["events"], step)))

# %% [markdown] id="ex08c-06"
# Fourteen, then twelve. In the first step `attn.out_proj.weight`, `attn.out_proj.bias` and
# `mix.weight` are gathered where they are read, one call each, inside the forward of `attn` and
# of the root, and tied to those modules: 8 calls in forward, 6 in backward. From then on each is
# part of its module's unit. In the second step the root's forward starts by gathering
# `mix.weight`, and the attention's four parameters come in one all-gather (no release between):
# 6 calls in forward, 6 in backward. A module's weight and bias always travel in one call. The
# embedding's weight is gathered four
# times a step: for `embed` and for the tied `head`, in forward and again in backward, released
# after each module (reuse distance 0). In backward the outermost module goes first: the root
# gathers `mix` before the head gathers the embedding, because the root's output *is* the head's
# output and the outer hook runs first.
#
# This is DeepSpeed 0.19.8's pattern, call for call. Run on this model on 2 CPU ranks, it makes
# 8 + 6 parameter all-gathers in the first step and 6 + 6 in every step after, of the same sizes
# in the same order: its unit of partitioning is a parameter, so reading `out_proj.weight` and
# then `out_proj.bias` gathers them one by one.

# %% [markdown] id="ex08c-07"
# ## What releasing saves
#
# **Predict, then run.** `Hoarder` below gathers like yours but never releases a group itself
# (the engine still does, once the group's gradient is reduced). What is the peak of gathered
# elements at once (`engine.stage3_stats().peak_gathered_numel`) with your hooks, and with the
# hoarder? Per module: `embed` 512, the attention's in-projection 816 (768 + 48), its
# `out_proj` 272 (256 + 16), `mlp.0` 544, `mlp.2` 528, `mix` 256 elements. Write both numbers down, and say when your peak happens.

# %% id="ex08c-08"
class Hoarder(MyHooks):
    # gathers like yours, never releases after a forward or a backward
    def __init__(self, params):
        super().__init__(params)
        params.after_backward = lambda ids: None

    def post_forward(self, module, inputs, output):
        self.frames.pop()
        if not self.frames and not self.params.in_backward:
            self.params.end_forward_pass()
        return output


run, hoard = two_steps(MyHooks), two_steps(Hoarder)
sizes = {"mix": 256, "attn": 816, "attn.out_proj": 272}
print(f"peak gathered elements: yours {run['peak']:,}; the hoarder's {hoard['peak']:,} "
      f"(the whole model: 2,928)")
print(f"yours: {' + '.join(f'{n} {k}' for k, n in sizes.items())} = {sum(sizes.values()):,}")
print(f"all-gathers in step 2: yours {len(run['per_step'][1])}; the hoarder's {len(hoard['per_step'][1])}")

# %% [markdown] id="ex08c-09"
# The hoarder holds the whole model (that is stage 2's memory for parameters) and saves the
# backward's gathers and the tied weight's second ones: 5 calls a step instead of 12. Your peak
# is the attention's unit while the root still holds `mix`: the root's forward gathered it first
# and keeps it until the root's own forward ends. On a real model the gathered peak is about the
# largest unit plus what outer modules hold; that is why DeepSpeed's `stage3_max_reuse_distance`
# and prefetch budgets (chapter 8) are bounds on top of it.

# %% [markdown] id="ex08c-10"
# ## What it costs on the wire
#
# **Predict, then run.** With Ψ = 2,928 fp32 parameters (no padding on 2 ranks), how many bytes
# of parameters do your all-gathers assemble in the second step, counting the tied weight's
# extra gathers? And how many does each rank send, by chapter 2's ring convention ((N−1)/N of
# each all-gather's output)?

# %% id="ex08c-11"
run = two_steps(MyHooks)
total = sum(b for _, b in run["per_step"][1])
print(f"gathered in step 2: {total:,} bytes = 4 x (2 x 2,928 + 2 x 512) = {4 * (2 * 2928 + 2 * 512):,}")
print(f"sent by each rank: (N-1)/N x {total:,} = {total // 2:,} bytes")

# %% [markdown] id="ex08c-12"
# 2Ψ of parameters per step, plus the tied weight once more in forward and once more in backward: stage 3's price
# for holding only a slice (the reduce-scatter of the gradients adds the third Ψ of chapter 3's
# 3Ψ). A reuse distance that spans the model would keep the embedding gathered from the head's use
# until its own and save both extra gathers.
#
# ## The check
#
# It runs your class on 2 and 3 ranks for 3 steps, beside zerolab's `ModuleHooks` on the same
# engine, then once more on 2 ranks with `stage3_max_reuse_distance` 1,200 (the last modules of
# forward stay gathered for backward) and the MLP checkpointed (`torch.utils.checkpoint`,
# `use_reentrant=False`: its forward runs again inside backward), and compares a failure on a rank (which phase raised), the peak of gathered elements
# (a class that never releases fails: "never released: peak X vs Y"), every gather and release in
# order, the ledger's parameter all-gathers (calls and bytes), then the losses and the parameters
# bit for bit. Where yours differ, it names the likely mistake: gathers but never releases,
# releases before backward and never gathers again, gathers again the wrong module's groups,
# forgets the weight read outside its module or to tie it for good, gathers a unit group by
# group, does not release after a module's backward, releases what the reuse distance keeps
# (`params.reshard` instead of `params.after_forward`, or module fetches missing from the trace),
# releases after the recomputation in backward.

# %% id="ex08c-13" tags=["check"]
from zerolab.course.checks.hooks3 import check_gather_hooks

check_gather_hooks(MyHooks)

# %% [markdown] id="ex08c-14"
# ## What we measured
#
# - Two steps on 2 ranks: 14 parameter all-gathers, then 12 once the external weights are tied to
#   the modules that read them (6 in forward, 6 in backward: DeepSpeed's calls, size for size);
#   each group released after every module's forward and backward that used it.
# - At reuse distance 1,200 with the MLP checkpointed: 34 all-gathers in 3 steps instead of 38
#   (the root's `mix.weight` and the tied embedding stay gathered across the turn); the MLP's
#   recomputation in backward gathers nothing and releases nothing.
# - The peak of gathered elements: 1,344 with your releases, 2,928 (the whole model) without.
# - 27,520 bytes assembled per step: 2Ψ of parameters plus the tied weight twice more.
#
# ## Where this lives
#
# In DeepSpeed 0.19.8, `DeepSpeedZeRoOffload._register_deepspeed_module`
# (`runtime/zero/parameter_offload.py`) registers on every module a forward pre-hook
# (`pre_sub_module_forward_function`: the coordinator's `fetch_sub_module`, which also
# prefetches), a forward hook (`post_sub_module_forward_function`: `release_sub_module`, which
# keeps a parameter used again within the reuse distance), a forward hook that wraps the outputs
# so that their first gradient runs `fetch_sub_module` for the module's backward
# (`_pre_backward_module_hook`), and a pre-hook that wraps the inputs so that, once all their
# gradients are in, `post_sub_module_backward_function` releases after the module's backward.
# `ZeROOrderedDict.__getitem__` replaces each module's `_parameters` to catch a parameter read
# outside its module and ties it to the running module for good (`register_external_parameter`,
# `runtime/zero/partition_parameters.py`, which a model may also call by hand). Your class, like
# zerolab's `ModuleHooks`, makes every module's fetch an event of the coordinator's trace, the
# modules with no parameters included (`top_up`, where DeepSpeed also tops up the prefetch);
# zerolab's also refuses a parameter read in the loss (`ExternalParameterError`), which your
# class does not need here.
#
# ## Questions
#
# 1. With `stage3_max_reuse_distance` at DeepSpeed's default 10⁹, which gathers of the step above
#    would disappear? Why does calling `params.after_forward` (not a bare release) keep your class
#    right for that setting too?
# 2. Your `on_param_read` ties an external weight to the innermost running module
#    (`self.frames[-1]`). What would tying it to the outermost one cost in memory on a
#    48-layer transformer whose attention reads `out_proj.weight`?
# 3. With activation checkpointing, a module's forward runs again inside backward. Which of
#    your hooks must then leave the parameters gathered, and how does `params.in_backward` tell?
# 4. Why must every rank gather the same groups in the same order? What would happen if one rank
#    skipped the tied weight's second gather?
#
# The check kept its ranks running, so that a second try is quick. Stop them when you are done:

# %% id="ex08c-15"
crew.close()
hooks3.close_crews()
