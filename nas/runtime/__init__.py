"""What the search runs outside its own logic: worker processes, and the user's own code.

* :mod:`nas.runtime.workers`: process pools whose workers end with their caller, and the watcher
  that ends a local Ray cluster's agents once the driver has died;
* :mod:`nas.runtime.signals`: a scheduler's SIGTERM taken as a Ctrl-C, so that a stopped search
  records what ended and says how to resume;
* :mod:`nas.runtime.plugins`: the user's functions (``accuracy.fn``, ``data.fn``), imported by
  ``module:function``, called with their failures typed, and the code sent to every node.

:mod:`nas.core` stays pure (plain types and logic a test can call without a process, a file or a
network); an import-linter contract keeps these modules' standard-library tools out of it.
"""
