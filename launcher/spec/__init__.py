"""1. Spec: an experiment's config.yaml + CLI flags + the site file -> one merged spec.

experiment (load, merge the layers, provenance), site (the site file), runtime (the runtime
registry), paths (where sf finds its templates, configs and runs)."""
