"""A batch job as an enabled systemd unit on its host: the job outlives the host (issue 39).

batch.yml installs one unit per job (`sparkops-batch-NAME.service`, WantedBy
multi-user.target, after the serving unit), so a reboot or a power cycle brings the job back and
the client's exactly-once resume carries on. Python owns every byte of it:

unit.py: the unit file (restart policy from the client's exit statuses, the wait for serving
before it, the notification after it), rendered from one validated spec.
state.py: what systemd says about a job's unit (`systemctl show`), in words: its state, how many
times it restarted, why it last stopped; `batch status` and `batch units` print it.
wait.py: `sparkops batch wait-ready`, the unit's ExecStartPre: after boot the serving stack
must answer a real chat completion before the client sends a record.
notify.py: `sparkops batch notify`, one JSON POST per finish, stop, stall, spent restart budget.
cli.py: those commands, registered under `sparkops batch`.
"""
