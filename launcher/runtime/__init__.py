"""The verl runtime: which software runs inside the job, and how commands enter it.

A runtime is a site artifact, published by an admin in a registry file
(`$FORGE_RUNTIME_REGISTRY_FILE`, else the site's `runtime_registry`):

    verl:
      "0.9.1": {kind: venv, path: /opt/sf/runtimes/verl-0.9.1}
      "0.9.0": {kind: module, modules: [cuda/12.4, verl/0.9.0]}
      "0.8.5": {kind: pyxis, image: /images/verl-0.8.5.sqsh, mounts: [/data:/data]}
      "0.8.4": {kind: apptainer, image: /images/verl-0.8.4.sif, binds: [/data]}
      "0.8.3": {kind: oci, bundle: /opt/sf/containers/verl-0.8.3, python: /opt/sf/runtime/bin/python}

or named for every version at once by `$FORGE_IMAGE_VERL` (a venv directory, a .sif
image for apptainer, anything else is a pyxis/enroot image).

How a kind runs commands:
  venv       `source <path>/bin/activate`; its python runs everything
  module     `module load <modules...>`; `python3` from the modules
  pyxis      srun steps get `--container-image=<image> --container-mounts=<mounts>`
  apptainer  commands run as `apptainer exec --nv --bind <binds> <image> ...`
  oci        Slurm's own OCI containers (oci.conf + runc): srun steps get
             `--container=<bundle>`; the bundle's config.json says what is mounted
             (scripts/build-container builds one, scripts/sf-oci-run is oci.conf's
             RunTimeRun). The batch script stays on the host; every Ray node, the barrier,
             the preflight and the driver are srun steps in the container.

This package is the runtime's model, shared by the login side and the job (standard library
only): model.py the Runtime as plan.json carries it; base.py the interface a kind implements
(activation, step launch, doctor's checks, mount hints, its registry keys and their parse);
one module per kind; registry.py the kinds by name. Which runtime a site publishes for a verl
version is looked up on the login side (launcher/spec/runtimes.py).
"""

from __future__ import annotations

from launcher.runtime.base import RegistryError, RuntimeKind
from launcher.runtime.model import Runtime
from launcher.runtime.registry import CONTAINER_KINDS, KINDS, REGISTRY, kind_named

__all__ = ["CONTAINER_KINDS", "KINDS", "REGISTRY", "RegistryError", "Runtime", "RuntimeKind", "kind_named"]
