"""zerolab.course: what only the course uses: the chapters' runs (chapters/), the exercises' checks
(checks/), the visual lab (lab/), the knobs, runs and plots the notebooks call, the learner's
progress and working copy.

Its layer in docs/ARCHITECTURE.md."""
