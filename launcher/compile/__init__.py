"""2. Compile (pure): a merged spec -> a Plan (launcher.plan).

compiler (methods, knobs, pools -> verl Hydra overrides), rules/ (every product rule with its
error, one module per theme, their order in rules/__init__), knobs (the knob table), values
(Hydra value text), catalog (the method configs), verlcheck/verlcache (compose with the installed verl's
own Hydra config; cache it per verl version), scheduler_options (the daily sbatch options)."""
