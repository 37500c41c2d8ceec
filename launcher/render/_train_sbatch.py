from launcher.render.template_runtime import LoopContext, Macro, Markup, Namespace, TemplateNotFound, TemplateReference, TemplateRuntimeError, Undefined, escape, identity, internalcode, markup_join, missing, str_join
name = 'sf/train.sbatch.j2'
# long: Jinja's code of the whole template
def root(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    l_0_components = resolve('components')
    l_0_sf_version = resolve('sf_version')
    l_0_experiment = resolve('experiment')
    l_0_method = resolve('method')
    l_0_framework = resolve('framework')
    l_0_framework_version = resolve('framework_version')
    l_0_array = resolve('array')
    l_0_script_name = resolve('script_name')
    l_0_login_env_unset = resolve('login_env_unset')
    l_0_run_dir = resolve('run_dir')
    l_0_max_requeues = resolve('max_requeues')
    l_0_env_lines = resolve('env_lines')
    l_0_runtime_label = resolve('runtime_label')
    l_0_activate_lines = resolve('activate_lines')
    l_0_sf_root = resolve('sf_root')
    l_0_host_python = resolve('host_python')
    l_0_logger_lines = resolve('logger_lines')
    l_0_launcher = resolve('launcher')
    l_0_entry = resolve('entry')
    l_0_overrides = resolve('overrides')
    l_0_requeue = resolve('requeue')
    l_0_signal_lead_s = resolve('signal_lead_s')
    l_0_supervise_args = resolve('supervise_args')
    try:
        t_1 = environment.filters['sbatch']
    except KeyError:
        @internalcode
        def t_1(*unused):
            raise TemplateRuntimeError("No filter named 'sbatch' found.")
    pass
    yield '#!/bin/bash\n'
    l_1_loop = missing
    for l_1_comp, l_1_loop in LoopContext((undefined(name='components') if l_0_components is missing else l_0_components), undefined):
        _loop_vars = {}
        pass
        if (not environment.getattr(l_1_loop, 'first')):
            pass
            yield '#SBATCH hetjob\n'
        yield '# -- het group '
        yield str(environment.finalize(environment.getattr(l_1_comp, 'het_group')))
        yield ': pool '
        yield str(environment.finalize(environment.getattr(l_1_comp, 'pool')))
        yield ' ('
        yield str(environment.finalize(environment.getattr(l_1_comp, 'nodes')))
        yield ' x '
        yield str(environment.finalize(environment.getattr(l_1_comp, 'gpus')))
        yield ' GPUs'
        if environment.getattr(l_1_comp, 'spares'):
            pass
            yield ' + '
            yield str(environment.finalize(environment.getattr(l_1_comp, 'spares')))
            yield ' spare node'
            if (environment.getattr(l_1_comp, 'spares') != 1):
                pass
                yield 's'
        yield ', series '
        yield str(environment.finalize(environment.getattr(l_1_comp, 'series')))
        yield ')\n'
        for l_2_directive in environment.getattr(l_1_comp, 'directives'):
            _loop_vars = {}
            pass
            yield str(environment.finalize(t_1(l_2_directive)))
            yield '\n'
        l_2_directive = missing
        yield from context.blocks['extra_sbatch'][0](context.derived({'comp': l_1_comp, 'loop': l_1_loop}))
    l_1_loop = l_1_comp = missing
    yield '#\n# Rendered by sf '
    yield str(environment.finalize((undefined(name='sf_version') if l_0_sf_version is missing else l_0_sf_version)))
    yield ' for experiment '
    yield str(environment.finalize((undefined(name='experiment') if l_0_experiment is missing else l_0_experiment)))
    yield ' ('
    yield str(environment.finalize((undefined(name='method') if l_0_method is missing else l_0_method)))
    yield ', '
    yield str(environment.finalize((undefined(name='framework') if l_0_framework is missing else l_0_framework)))
    yield ' '
    yield str(environment.finalize((undefined(name='framework_version') if l_0_framework_version is missing else l_0_framework_version)))
    yield ').\n'
    if (undefined(name='array') if l_0_array is missing else l_0_array):
        pass
        yield '# A job array: task i is point i of sweep '
        yield str(environment.finalize(environment.getattr((undefined(name='array') if l_0_array is missing else l_0_array), 'sweep_id')))
        yield "; manifest.json beside this script\n# holds each point's run dir and overrides. `sbatch --array=I,J "
        yield str(environment.finalize((undefined(name='script_name') if l_0_script_name is missing else l_0_script_name)))
        yield '` reruns points.\n'
    else:
        pass
        yield '# Standalone: `sbatch '
        yield str(environment.finalize((undefined(name='script_name') if l_0_script_name is missing else l_0_script_name)))
        yield '` submits it again by hand. The job runs the verl\n# command plan.json holds (shown below); the run directory holds plan.json, overrides.txt, logs/.\n'
    yield 'set -uo pipefail\n\n'
    yield from context.blocks['prologue'][0](context)
    if (undefined(name='login_env_unset') if l_0_login_env_unset is missing else l_0_login_env_unset):
        pass
        yield "# the login node's Python and library paths stay out of the job (site: slurm.pass_login_env)\n"
        yield str(environment.finalize((undefined(name='login_env_unset') if l_0_login_env_unset is missing else l_0_login_env_unset)))
        yield '\n'
    if (undefined(name='array') if l_0_array is missing else l_0_array):
        pass
        yield 'SF_SWEEP_DIR='
        yield str(environment.finalize(environment.getattr((undefined(name='array') if l_0_array is missing else l_0_array), 'sweep_dir')))
        yield '\nSF_MANIFEST="$SF_SWEEP_DIR/manifest.json"\n'
    else:
        pass
        yield 'SF_RUN_DIR='
        yield str(environment.finalize((undefined(name='run_dir') if l_0_run_dir is missing else l_0_run_dir)))
        yield '\nexport SF_RUN_DIR\n'
    yield 'SF_MAX_REQUEUES='
    yield str(environment.finalize((undefined(name='max_requeues') if l_0_max_requeues is missing else l_0_max_requeues)))
    yield '\n\n# -- environment (site, then experiment) --\n'
    for l_1_line in (undefined(name='env_lines') if l_0_env_lines is missing else l_0_env_lines):
        _loop_vars = {}
        pass
        yield str(environment.finalize(l_1_line))
        yield '\n'
    l_1_line = missing
    yield '# -- runtime: '
    yield str(environment.finalize((undefined(name='runtime_label') if l_0_runtime_label is missing else l_0_runtime_label)))
    yield ' --\n'
    yield from context.blocks['module_loads'][0](context)
    for l_1_line in (undefined(name='activate_lines') if l_0_activate_lines is missing else l_0_activate_lines):
        _loop_vars = {}
        pass
        yield str(environment.finalize(l_1_line))
        yield '\n'
    l_1_line = missing
    if (undefined(name='sf_root') if l_0_sf_root is missing else l_0_sf_root):
        pass
        yield 'export PYTHONPATH='
        yield str(environment.finalize((undefined(name='sf_root') if l_0_sf_root is missing else l_0_sf_root)))
        yield '${PYTHONPATH:+:$PYTHONPATH}\n'
    yield '# `python -m launcher.injob` must not pick up a launcher/ folder in the submit directory, which\n# other users may write to, whether sf is a checkout or installed (Python 3.11+ reads it).\nexport PYTHONSAFEPATH=1\nSF_PYTHON='
    yield str(environment.finalize((undefined(name='host_python') if l_0_host_python is missing else l_0_host_python)))
    yield '\n'
    if (undefined(name='array') if l_0_array is missing else l_0_array):
        pass
        yield '\n# -- array sweep '
        yield str(environment.finalize(environment.getattr((undefined(name='array') if l_0_array is missing else l_0_array), 'sweep_id')))
        yield ': '
        yield str(environment.finalize(environment.getattr((undefined(name='array') if l_0_array is missing else l_0_array), 'size')))
        yield ' points; this task\'s run dir, checkpoint dir\n# and overrides come from manifest.json by SLURM_ARRAY_TASK_ID (one run dir per point) --\nSF_TASK="${SLURM_ARRAY_TASK_ID:-}"\nif [[ ! "$SF_TASK" =~ ^[0-9]+$ ]]; then\n  echo "sf: this script is an array sweep ('
        yield str(environment.finalize(environment.getattr((undefined(name='array') if l_0_array is missing else l_0_array), 'sweep_id')))
        yield '): submit it with --array" >&2\n  exit 2\nfi\nSF_RUN_DIR="$("$SF_PYTHON" -m launcher.injob point "$SF_MANIFEST" "$SF_TASK")" || exit 2\nexport SF_RUN_DIR\necho "sf: array task $SF_TASK -> $SF_RUN_DIR (its output: logs/slurm-${SLURM_ARRAY_JOB_ID}_${SF_TASK}.out there)"\nexec >>"$SF_RUN_DIR/logs/slurm-${SLURM_ARRAY_JOB_ID}_${SF_TASK}.out" 2>&1\n'
    if (undefined(name='logger_lines') if l_0_logger_lines is missing else l_0_logger_lines):
        pass
        yield '\n# -- one logger run across restarts: the same W&B run id in every attempt and on every node --\n'
        for l_1_line in (undefined(name='logger_lines') if l_0_logger_lines is missing else l_0_logger_lines):
            _loop_vars = {}
            pass
            yield str(environment.finalize(l_1_line))
            yield '\n'
        l_1_line = missing
    yield '# -- what runs on the head once Ray is up ('
    yield str(environment.finalize((undefined(name='launcher') if l_0_launcher is missing else l_0_launcher)))
    yield '): the job reads it from plan.json;\n# these arrays show it. A script whose arrays differ from plan.json is refused at job start\n# (the supervisor compares their digest, SF_SHOWN below): change a run by editing its\n# experiment and submitting again --\nSF_ENTRY=(\n'
    for l_1_arg in (undefined(name='entry') if l_0_entry is missing else l_0_entry):
        _loop_vars = {}
        pass
        yield '  '
        yield str(environment.finalize(l_1_arg))
        yield '\n'
    l_1_arg = missing
    yield ')\n'
    if (undefined(name='array') if l_0_array is missing else l_0_array):
        pass
        yield '# the overrides of each point are in manifest.json (the supervisor reads them by task id)\nSF_OVERRIDES=()\n'
    else:
        pass
        yield 'SF_OVERRIDES=(\n'
        for l_1_arg in (undefined(name='overrides') if l_0_overrides is missing else l_0_overrides):
            _loop_vars = {}
            pass
            yield '  '
            yield str(environment.finalize(l_1_arg))
            yield '\n'
        l_1_arg = missing
        yield ')\n'
    yield 'sf_phase() { "$SF_PYTHON" -m launcher.injob phase "$SF_RUN_DIR" "$@" || true; }\n\n'
    if (undefined(name='requeue') if l_0_requeue is missing else l_0_requeue):
        pass
        yield '# Requeue on the wall-time/preemption signal (--signal=B:USR1@'
        yield str(environment.finalize((undefined(name='signal_lead_s') if l_0_signal_lead_s is missing else l_0_signal_lead_s)))
        yield '): the whole job\n# (every het group) goes back to the queue, at most SF_MAX_REQUEUES times, and verl resumes\n# from the newest checkpoint (resume_mode=auto, absolute checkpoint dir). A job that ends\n# normally is never requeued: only this signal does it.\nsf_on_usr1() {\n  local restarts="${SLURM_RESTART_COUNT:-0}"\n  if (( restarts < SF_MAX_REQUEUES )); then\n    sf_phase requeued "restart=$((restarts + 1))" "signal=USR1"\n    scontrol requeue "${SLURM_HET_JOB_ID:-$SLURM_JOB_ID}"\n  else\n    sf_phase requeue_refused "restarts=$restarts" "max_requeues=$SF_MAX_REQUEUES" "signal=USR1"\n    "$SF_PYTHON" -m launcher.injob reason "$SF_RUN_DIR" \\\n      "requeue refused: the job was already requeued $restarts times (max_requeues=$SF_MAX_REQUEUES); it runs on until its time limit" || true\n  fi\n}\ntrap sf_on_usr1 USR1\n\n'
    yield '# SIGTERM (scancel, a requeue) reaches every process of the job; the supervisor handles it\n# and stops the steps itself. This shell keeps waiting for it rather than dying first: when\n# the batch shell ends, Slurm kills what is left at once, which would cut the supervisor\'s\n# last words short (its ended phase, or the excluded nodes after a requeue).\ntrap : TERM\n\n# Nothing here touches the run dir: sf made it and its logs/, checkpoints/, metrics/ with their\n# modes (launcher/runs.py), and the supervisor first checks it is still this user\'s alone (a\n# folder another user swapped in is refused, nothing written into it) and sets the umask.\n# verl\'s file logger (trainer.logger includes `file`; read by `sf metrics`) opens its file\n# with mode "wb": one file per attempt, so a requeued attempt keeps the earlier history.\nexport VERL_FILE_LOGGER_PATH="$SF_RUN_DIR/metrics/attempt-${SLURM_RESTART_COUNT:-0}.jsonl"\n\n# the words SF_ENTRY and SF_OVERRIDES hold, as one digest (launcher.injob.contract.shown_digest)\nSF_SHOWN="$(printf \'%s\\0\' "${#SF_ENTRY[@]}" "${SF_ENTRY[@]}" "${SF_OVERRIDES[@]}" | sha256sum)"\n"$SF_PYTHON" -m launcher.injob supervise \\\n'
    for l_1_arg in (undefined(name='supervise_args') if l_0_supervise_args is missing else l_0_supervise_args):
        _loop_vars = {}
        pass
        yield '  '
        yield str(environment.finalize(l_1_arg))
        yield ' \\\n'
    l_1_arg = missing
    yield '  --shown "${SF_SHOWN%% *}" &\nSF_SUPERVISOR=$!\nwhile true; do\n  wait "$SF_SUPERVISOR"\n  rc=$?\n  # a trapped signal interrupts `wait`; the supervisor is still running then\n  kill -0 "$SF_SUPERVISOR" 2>/dev/null || break\ndone\n'
    yield from context.blocks['epilogue'][0](context)
    yield 'exit "$rc"\n'

def block_extra_sbatch(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    pass

def block_prologue(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    pass

def block_module_loads(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    l_0_module_lines = resolve('module_lines')
    pass
    for l_1_line in (undefined(name='module_lines') if l_0_module_lines is missing else l_0_module_lines):
        _loop_vars = {}
        pass
        yield str(environment.finalize(l_1_line))
        yield '\n'
    l_1_line = missing

def block_epilogue(context, missing=missing):
    resolve = context.resolve_or_missing
    undefined = environment.undefined
    concat = environment.concat
    cond_expr_undefined = Undefined
    if 0: yield None
    _block_vars = {}
    pass

blocks = {'extra_sbatch': block_extra_sbatch, 'prologue': block_prologue, 'module_loads': block_module_loads, 'epilogue': block_epilogue}
debug_info = '17=42&18=45&21=49&22=68&23=71&25=74&28=77&29=87&30=90&31=92&33=97&38=100&39=101&41=104&43=106&44=109&47=114&50=117&53=119&54=122&56=126&57=128&62=129&63=132&65=135&66=138&71=141&72=143&74=146&78=150&86=152&89=155&90=158&93=162&98=164&99=168&102=172&107=178&108=182&114=187&115=190&152=193&153=197&164=201&25=204&38=213&57=222&58=231&59=234&164=238'

# ruff: noqa
# Generated by `python -m launcher.render.sbatch_template` from templates/train.sbatch.j2: do not edit.
SOURCE_SHA256 = 'cb1eb068d39d31a9569d2d67a944b19d417a9d5072ffa21327bbb2c006624964'
