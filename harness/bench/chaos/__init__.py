"""A fault campaign: a real study under a seeded schedule of faults, compared bit for bit
with an unfaulted twin.

The study (:data:`~harness.bench.chaos.schedule.SPEC`: nano, 2 variants x 2 seeds, 60 steps, an
evaluation and a checkpoint every 5) runs once without faults (the twin), then once per
schedule, each time as a user runs it: ``harness run SPEC`` against a real ``mlflow server`` on
127.0.0.1, on an embedded local Ray or (schedules with a node fault) on a ``ray start --head``
cluster with a second node joined on loopback. A schedule
(:func:`~harness.bench.chaos.schedule.draw_schedule`, from its seed alone) holds one to three
faults, each fired when the study's progress (checkpoints on storage, summed over the trials)
reaches a drawn point, after a drawn delay:

==========================  ==============================================================
kind                        what happens
==========================  ==============================================================
``trial_kill_step``         SIGKILL of a trial's process (a Ray worker) while it trains
``trial_kill_checkpoint``   SIGKILL of a trial's process the moment a new checkpoint of it
                            appears on storage (while it is being written)
``driver_kill``             SIGKILL of the driver (``harness run``), then ``--resume``
``driver_term``             SIGTERM of the driver, then ``--resume``
``driver_int``              Ctrl-C (SIGINT to the driver's process group), then ``--resume``
``mlflow_restart``          the tracking server stopped and restarted, 1-3 times
``mlflow_during_report``    the tracking server stopped once the study writes its results
                            (the report phase), restarted after a drawn pause
``node_leave``              the second Ray node stopped with its trials on it; a fresh
                            node joins after a drawn pause
==========================  ==============================================================

At the end (after ``harness report STUDY --from STUDY_DIR`` where the study's output asks for
it) the study must equal its twin: the results table (all but the timing column), every
evaluation of every trial's curve (every metric but throughput, bit for bit), every headline
number on the parent run, exactly one parent run and one child run per trial, each metric
step logged once, every run ended as finished, and no process of the study left running
(every process the campaign starts carries :data:`~harness.bench.chaos.processes.TAG` in its
environment, so one that left its session is found too). A schedule that fails is replayed
with ``--replay SEED``: the same faults at the same progress points, after the same delays
(where a SIGKILL lands inside the code still depends on the machine's timing). A server's or a
node's return runs beside the study, so that the next fault fires on time.

The modules, by responsibility:

- :mod:`~harness.bench.chaos.schedule` the campaign's study and its schedules of faults (a function of a seed)
- :mod:`~harness.bench.chaos.faults` each kind of fault, a small object in a registry
- :mod:`~harness.bench.chaos.trial_faults` faults injected inside the trials (NaN weights, a kill
  at a step): Lightning callbacks handed to ``run_study(trial_callbacks=...)``, for the tests
- :mod:`~harness.bench.chaos.study` one study under a schedule, run as a user runs it
- :mod:`~harness.bench.chaos.processes` the processes of the campaign (found by their tag)
- :mod:`~harness.bench.chaos.comparison` a finished study's record, compared with its twin's
- :mod:`~harness.bench.chaos.campaign` the twin, every schedule, the table and the JSON (``main``)
"""
