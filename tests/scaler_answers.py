"""Exercise 4's loss-scale rule as a learner writes it (tests/test_exercises.py and
tests/test_i18n.py feed it to zerolab.course.checks.ch04): DeepSpeed 0.19.8's rule, or, on request, with a
mistake: ``factor=2.0`` a hard-coded scale factor; ``floor_ignores_hysteresis`` gives up at the
minimum scale before hysteresis has run out; ``raise_in_engine`` a ValueError at iteration 3 of
the engine's scaler only (min_scale 300), after every sequence passed."""


def update_scale(factor=None, floor_ignores_hysteresis=False, raise_in_engine=False):
    from zerolab.precision.loss_scaler import LossScaleAtMinimum

    def fn(state, overflow):
        if raise_in_engine and state["min_scale"] == 300 and state["cur_iter"] == 3:
            raise ValueError("only in the engine")
        f = factor or state["scale_factor"]
        if overflow:
            if floor_ignores_hysteresis and state["cur_scale"] == state["min_scale"]:
                raise LossScaleAtMinimum(state["cur_scale"], state["cur_iter"])
            if state["delayed_shift"] == 1 or state["cur_hysteresis"] == 1:
                if state["cur_scale"] == state["min_scale"]:
                    raise LossScaleAtMinimum(state["cur_scale"], state["cur_iter"])
                state["cur_scale"] = max(state["cur_scale"] / f, state["min_scale"])
            else:
                state["cur_hysteresis"] -= 1
            state["last_overflow_iter"] = state["cur_iter"]
        else:
            if state["consecutive_hysteresis"]:
                state["cur_hysteresis"] = state["delayed_shift"]
            stable = state["cur_iter"] - state["last_overflow_iter"] - 1
            if stable > 0 and stable % state["scale_window"] == 0:
                if not state["consecutive_hysteresis"]:
                    state["cur_hysteresis"] = state["delayed_shift"]
                state["cur_scale"] *= f
        state["cur_iter"] += 1
    return fn
