"""Build the Lambda layer into build/layer, as `make synth` does before it runs the app (infra/app.py).

`python infra/build_layer.py`; JOBSCHED_LAYER_NO_DEPS=1 leaves out the pip dependencies (offline).
"""

from __future__ import annotations

from jobsched_infra.layer import main

main()
