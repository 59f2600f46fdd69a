"""What configures a run: the configuration files (config, config_checks), `.gitignore` files,
and every INVARIANT_CHECK_* environment variable (envvars).
"""
