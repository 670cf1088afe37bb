"""Unit tests of danlu.train's parts: env, sampler, LR control, anomalies, batch, AMP."""

from __future__ import annotations

import math

import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.accumulate import split
from danlu.train.batch import AdaptiveBatch, GradientNoiseScale, PowerSchedule
from danlu.train.scaling import lr_factor


def test_env_defaults_and_values() -> None:
    off = dt.JobEnv.from_environ({})
    assert (off.world_size, off.rank, off.job_id, off.metrics_url) == (1, 0, None, None)
    on = dt.JobEnv.from_environ(
        {
            "DANLU_JOB_ID": "j1",
            "DANLU_API_URL": "http://h:1/",
            "DANLU_TOKEN": "t",
            "DANLU_BATCH_SIZE": "16",
            "DANLU_GPU_MEMORY_LIMIT": "1000",
            "WORLD_SIZE": "4",
            "RANK": "3",
            "TORCHELASTIC_RESTART_COUNT": "2",
        }
    )
    assert on.metrics_url == "http://h:1/api/v1/jobs/j1/metrics"
    assert (on.batch_size, on.gpu_memory_limit, on.rank, on.elastic_restart_count) == (
        16,
        1000,
        3,
        2,
    )
    with pytest.raises(ConfigError, match="DANLU_BATCH_SIZE"):
        dt.JobEnv.from_environ({"DANLU_BATCH_SIZE": "x"})
    assert dt.PREEMPTED_EXIT_CODE == 75


@pytest.mark.parametrize("sizes", [[2, 2, 2], [2, 1, 3], [3, 1, 2, 2]])
def test_sampler_exactly_once_across_world_size_changes(sizes: list[int]) -> None:
    n, local = 37, 3
    s = dt.ElasticSampler(n, seed=5)
    seen: list[int] = []
    for world in sizes + [1] * 20:
        if s.epoch_done:
            break
        state = s.state_dict()  # a "restart" at a new world size
        s = dt.ElasticSampler(n, seed=5)
        s.load_state_dict(state)
        for _ in range(2):
            if s.epoch_done:
                break
            parts = [s.window(0, local, r, world) for r in range(world)]
            seen += [i for p in parts for i in p.indices[: p.real]]
            s.commit(parts[0].global_real)
    assert sorted(seen) == list(range(n))


def test_sampler_resumes_the_checkpointed_seeds_order_after_its_own_was_computed() -> None:
    """load_state_dict took the checkpoint's seed but kept the permutation cached for the
    same epoch under the old one: the resumed run saw some samples twice, others never."""
    orig = dt.ElasticSampler(20, seed=7)
    orig.commit(8)
    seen = orig.permutation()[:8]
    resumed = dt.ElasticSampler(20, seed=0)  # e.g. a script whose seed argument changed
    resumed.permutation()  # anything that looked at the order before the restore
    resumed.load_state_dict(orig.state_dict())
    rest = resumed.permutation()[resumed.offset :]
    assert rest == orig.permutation()[8:]
    assert sorted(seen + rest) == list(range(20))


def test_drop_last_trains_on_whole_batches_only_so_batch_norm_runs() -> None:
    """A last batch of one sample failed a model with batch normalisation in training
    mode ("Expected more than 1 value per channel"); ``drop_last`` skips the remainder."""
    data = tiny_regression(n=33)

    def run(**kw: object) -> dt.TrainContext:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 1)
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        return dt.fit(model, opt, data, mse_loss, epochs=2, global_batch_size=8, environ={}, **kw)

    with pytest.raises(ValueError, match="more than 1 value per channel"):
        run(metrics_file=False, progress=False)
    ctx = run(drop_last=True, metrics_file=False, progress=False)
    assert ctx.step_num == 8  # 4 whole batches of 8 an epoch; the 33rd sample is skipped
    assert ctx.sampler is not None and ctx.sampler.epoch == 2  # both epochs done
    s = dt.ElasticSampler(33, seed=5, drop_last=True)
    windows = list(s.batches(lambda: 4, 1, 2, follow_commits=False))
    assert [w.global_real for w in windows] == [8, 8, 8, 8] and s.epoch_done


@pytest.mark.parametrize(("n", "micro"), [(17, 16), (16, 3), (5, 2), (7, 7), (100, 7), (1, 1)])
def test_micro_batches_are_as_even_as_can_be(n: int, micro: int) -> None:
    parts = split(torch.arange(n), micro)
    sizes = [len(p) for p, _ in parts]
    assert len(sizes) == -(-n // micro) and sum(sizes) == n
    assert max(sizes) <= micro and max(sizes) - min(sizes) <= 1
    assert torch.equal(torch.cat([p for p, _ in parts]), torch.arange(n))
    assert sum(w for _, w in parts) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("n", "micro", "least", "sizes"),
    [
        (5, 2, 2, [3, 2]),
        (7, 2, 2, [3, 2, 2]),
        (3, 2, 2, [3]),
        (4, 2, 2, [2, 2]),
        (5, 2, 1, [2, 2, 1]),
    ],
)
def test_no_micro_batch_falls_below_the_least_the_model_needs(
    n: int, micro: int, least: int, sizes: list[int]
) -> None:
    parts = split(torch.arange(n), micro, least)
    assert [len(p) for p, _ in parts] == sizes
    assert torch.equal(torch.cat([p for p, _ in parts]), torch.arange(n))
    assert sum(w for _, w in parts) == pytest.approx(1.0)
    batch = dt.BatchController(n, micro=micro, min_micro=least)
    assert batch.accumulation == len(sizes)


def test_a_batch_norm_model_halved_to_two_after_an_oom_never_trains_on_a_lone_sample() -> None:
    """Global batch 5: an OOM halves the micro-batch to 2, the least a model with batch
    normalisation takes; the batch is then 3 + 2 (2 + 2 + 1 failed in batch normalisation)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1)
    )
    ctx = dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=5,
        dataset_size=40,
        metrics_file=False,
        progress=False,
        oom_injector=dt.inject_oom_at(5),
        environ={},
    )
    with ctx:
        results = [ctx.step(b, mse_loss) for b in ctx.batches(tiny_regression(n=40))]
    assert ctx.batch.micro == 2 and ctx.batch.oom_count == 1 and ctx.batch.accumulation == 2
    assert len(results) == 8 and all(math.isfinite(r.loss) for r in results)


def test_a_batch_grown_past_its_first_micro_batch_is_split_evenly() -> None:
    """A batch schedule growing the global batch from 16 to 17 accumulated 16 + 1: the lone
    sample failed batch normalisation. Now 9 + 8."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 1)
    )
    ctx = dt.fit(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        tiny_regression(n=200),
        mse_loss,
        global_batch_size=16,
        adaptive_batch=AdaptiveBatch("schedule", 16, total_steps=16, max_batch=32),
        drop_last=True,
        max_steps=8,
        metrics_file=False,
        progress=False,
        environ={},
    )
    assert ctx.batch.global_batch == 24 and ctx.batch.accumulation == 2  # 12 + 12


def test_lr_warmup_composes_with_a_torch_scheduler() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lr = dt.LRController(opt, sched, warmup_steps=4)
    seen = []
    for _ in range(6):
        lr.before_step()
        seen.append(lr.lr)
        opt.step()  # as a training loop does: the optimizer first, then the scheduler
        lr.after_step()
    assert seen == pytest.approx([0.25, 0.5, 0.5 * 0.75, 0.5, 0.25, 0.25])


def test_grad_norm_adaptive_lr() -> None:
    opt = torch.optim.SGD(tiny_model().parameters(), lr=0.1)
    lr = dt.LRController(opt, grad_norm_tau=1.0)
    lr.before_step(4.0)
    assert lr.lr == pytest.approx(0.025)  # lr0 * tau / max(|g|, tau)
    lr.after_step()
    lr.before_step(0.5)
    assert lr.lr == pytest.approx(0.1)


def test_anomaly_detector_kinds() -> None:
    det = dt.AnomalyDetector("skip", window=50, k=4.0, min_history=10)
    for i in range(30):
        assert det.check(1.0 + 0.01 * (i % 3), 1.0 + 0.01 * (i % 5)) is None
    assert det.check(float("nan"), 1.0) == "nonfinite_loss"
    assert det.check(1.0, float("inf")) == "nonfinite_grad"
    assert det.check(1.0, 0.0) == "zero_grad"
    assert det.check(1.0, 50.0) == "grad_spike"
    assert det.check(80.0, 1.0) == "loss_spike"
    assert det.total == 5


def test_nan_loss_is_skipped_and_counted_then_stop_raises() -> None:
    data = tiny_regression(64)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    calls = [0]

    def bad_loss(m: torch.nn.Module, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        calls[0] += 1
        loss = mse_loss(m, b)
        return loss * float("nan") if calls[0] == 2 else loss

    with dt.init(
        model, opt, global_batch_size=16, dataset_size=64, metrics_file=False, environ={}
    ) as ctx:
        before = [p.clone() for p in model.parameters()]
        results = [ctx.step(b, bad_loss) for _, b in zip(range(3), ctx.batches(data), strict=False)]
    assert [r.applied for r in results] == [True, False, True]
    assert ctx.anomaly is not None and ctx.anomaly.counts == {"nonfinite_loss": 1}
    assert ctx.history[-1]["anomalies"] == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    model2 = tiny_model()
    opt2 = torch.optim.SGD(model2.parameters(), lr=0.01)
    with (
        dt.init(
            model2, opt2, global_batch_size=16, anomaly="stop", metrics_file=False, environ={}
        ) as ctx2,
        pytest.raises(dt.TrainingAnomalyError, match="step 0"),
    ):
        ctx2.step(data.tensors, lambda m, b: mse_loss(m, b) * float("inf"))


def test_accumulation_equals_one_big_batch() -> None:
    data = tiny_regression(32)
    grads = []
    for micro in (32, 8, 5):
        model = tiny_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        with dt.init(
            model, opt, global_batch_size=32, micro_batch_size=micro, metrics_file=False, environ={}
        ) as ctx:
            ctx.engine.optimizer.zero_grad = lambda set_to_none=True: None  # keep grads
            ctx.step(data.tensors, mse_loss)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(grads[0], grads[1])
    torch.testing.assert_close(grads[0], grads[2])


def test_bf16_and_fp16_steps_run_and_count() -> None:
    data = tiny_regression(32)
    for precision in ("bf16", "fp16"):
        model = tiny_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with dt.init(
            model, opt, global_batch_size=32, precision=precision, metrics_file=False, environ={}
        ) as ctx:
            r = ctx.step(data.tensors, mse_loss)
        assert math.isfinite(r.loss)
        assert ctx.history[-1]["loss_scale"] == (65536.0 if precision == "fp16" else 1.0)


def test_power_schedule_and_gns_growth() -> None:
    sched = PowerSchedule(32, total_steps=100, alpha=1.0, multiple=8)
    assert [sched(0), sched(50), sched(100)] == [32, 48, 64]
    gns = GradientNoiseScale(beta=0.0)
    # |g_b|^2 = mu2 + sigma2/b ; mu2 = 1, sigma2 = 256 -> B_noise = 256
    gns.update(1 + 256 / 16, 16, 1 + 256 / 64, 64)
    assert gns.noise_scale == pytest.approx(256.0)
    ab = AdaptiveBatch("gns", 32, max_batch=128, multiple=8, gns=gns)
    assert ab.target(1, 32) == 128
    assert lr_factor("linear", 128, 32) == 4.0
    assert lr_factor("sqrt", 128, 32) == 2.0
    assert 1.0 <= lr_factor("adascale", 128, 32, sigma2=256.0, mu2=1.0) <= 4.0


def test_adaptive_batch_grows_global_batch_and_scales_lr() -> None:
    data = tiny_regression(512)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ab = AdaptiveBatch("schedule", 16, total_steps=4, alpha=1.0, max_batch=64)
    with dt.init(
        model,
        opt,
        global_batch_size=16,
        micro_batch_size=16,
        dataset_size=512,
        adaptive_batch=ab,
        lr_scaling="linear",
        metrics_file=False,
        environ={},
    ) as ctx:
        for _, b in zip(range(4), ctx.batches(data), strict=False):
            ctx.step(b, mse_loss)
    assert ctx.batch.global_batch == 32  # B(4) = 16 * (1 + 4/4)
    assert ctx.batch.accumulation == 2
    assert ctx.lr.lr == pytest.approx(0.02)
    assert [h["global_batch"] for h in ctx.history] == [16, 20, 24, 28]
    assert ctx.sampler is not None and ctx.sampler.offset == 16 + 20 + 24 + 28


def test_env_batch_size_sets_micro_batch() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with dt.init(
        model, opt, global_batch_size=64, metrics_file=False, environ={"DANLU_BATCH_SIZE": "16"}
    ) as ctx:
        assert (ctx.batch.micro, ctx.batch.accumulation) == (16, 4)


def test_batch_sizes_follow_every_assignment() -> None:
    """``local_batch`` and ``accumulation`` are plain attributes kept in step with
    ``global_batch``, ``world_size`` and ``micro``, however those are set."""
    from danlu.train.batch import BatchController

    b = BatchController(100, world_size=3, micro=16)
    assert (b.local_batch, b.micro, b.accumulation) == (34, 16, 3)
    b.micro = 5  # set directly, as the goodput probe does
    assert b.accumulation == 7
    b.set_global(10)
    assert (b.local_batch, b.micro, b.accumulation) == (4, 4, 1)
    b.on_oom()
    assert (b.micro, b.accumulation) == (2, 2)
    b.set_world_size(1)
    assert (b.local_batch, b.micro, b.accumulation) == (10, 2, 5)
    b.load_state_dict({"global_batch": 64, "micro": 8, "micro_cap": 8, "oom_count": 1})
    assert (b.local_batch, b.accumulation) == (64, 8)


def test_anomaly_total_counts_every_kind_and_survives_a_restore() -> None:
    det = dt.AnomalyDetector("skip", min_history=2)
    assert det.check(math.nan, None) == "nonfinite_loss"
    assert det.check(1.0, 0.0) == "zero_grad"
    det.count("rollback_failed")
    assert det.total == 3 == sum(det.counts.values())
    fresh = dt.AnomalyDetector("skip", min_history=2)
    fresh.load_state_dict(det.state_dict())
    assert fresh.total == 3


def test_steps_without_a_norm_check_the_loss_only() -> None:
    """Off the norm's cadence (``grad_norm=None``) a loss spike or a non-finite loss is still
    found, and healthy losses enter the loss window only."""
    det = dt.AnomalyDetector("skip", window=50, k=4.0, min_history=10)
    for i in range(20):
        assert det.check(1.0 + 0.01 * (i % 3), None) is None
    assert det.check(80.0, None) == "loss_spike"
    assert det.check(math.inf, None) == "nonfinite_loss"
    assert det.state_dict()["grad"] == []
    assert len(det.state_dict()["loss"]) == 20  # type: ignore[arg-type]


def test_a_sweep_trial_reads_its_hyper_parameters() -> None:
    env = dt.JobEnv.from_environ(
        {
            "DANLU_HPARAMS": '{"lr": 0.01, "opt": "adam"}',
            "DANLU_SWEEP_ID": "ab12",
            "DANLU_TRIAL": "3",
        }
    )
    assert (dict(env.hparams), env.sweep_id, env.trial) == ({"lr": 0.01, "opt": "adam"}, "ab12", 3)
    assert (
        dict(dt.JobEnv.from_environ({}).hparams) == {} and dt.JobEnv.from_environ({}).trial is None
    )
    assert dt.JobEnv.from_environ({"DANLU_ARRAY_INDEX": "42"}).array_index == 42
    assert dt.JobEnv.from_environ({}).array_index is None
    for bad, message in (("[1]", "must be a JSON object"), ("{lr", "is not JSON")):
        with pytest.raises(ConfigError, match=message):
            dt.JobEnv.from_environ({"DANLU_HPARAMS": bad})


def test_sampler_batches_used_as_documented_see_the_whole_epoch() -> None:
    """``batches()`` (its own cursor, the default) with :meth:`commit` after each batch, as
    its docstring says: the cursor counted from the committed offset, so each commit moved
    the next window twice as far and half the epoch was skipped. Without commits (a caller
    that reads ahead) and following the commits, it was and stays right."""
    for commit, follow in ((True, False), (False, False), (True, True)):
        s = dt.ElasticSampler(16, shuffle=False)
        seen: list[int] = []
        for lb in s.batches(lambda: 4, 0, 1, follow_commits=follow):
            seen += lb.indices
            if commit:
                s.commit(lb.global_real)
        assert seen == list(range(16)), (commit, follow)
        assert s.epoch_done == commit


@pytest.mark.parametrize("sizes", [[3, 3], [3, 2, 1], [2, 3, 4]])
def test_a_window_is_the_global_batch_whatever_the_world_size(sizes: list[int]) -> None:
    """Each step's window is the global batch (8) even where it does not divide by the world
    size: the ranks' shares differ by at most one, every window holds 8 (with ``drop_last``
    the last 5 of the 45 are skipped), and each sample is seen exactly once across resizes."""
    for drop_last in (False, True):
        s = dt.ElasticSampler(45, seed=3, drop_last=drop_last)
        seen: list[int] = []
        windows: list[int] = []
        for world in sizes + [1] * 10:
            state = s.state_dict()  # a restart at a new world size
            s = dt.ElasticSampler(45, seed=3, drop_last=drop_last)
            s.load_state_dict(state)
            ranks = [
                s.batches(rank=r, world_size=world, global_batch=lambda: 8) for r in range(world)
            ]
            for _ in range(2):
                parts = [next(it, None) for it in ranks]
                if parts[0] is None:
                    break
                shares = [p.real for p in parts if p is not None]
                assert max(shares) - min(shares) <= 1 and sum(shares) == parts[0].global_real
                seen += [i for p in parts if p is not None for i in p.indices[: p.real]]
                windows.append(parts[0].global_real)
                s.commit(parts[0].global_real)
        assert s.epoch_done
        expected = [8] * 5 + ([] if drop_last else [5])
        assert windows == expected, drop_last
        assert len(seen) == len(set(seen)) == sum(expected)
