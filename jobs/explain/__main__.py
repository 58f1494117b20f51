"""python -m jobs.explain: explain one decision of the replay (see jobs/explain/__init__.py)."""
import sys

from jobs.explain import main

sys.exit(main())
