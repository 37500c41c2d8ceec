"""The command line (click): app (the `sf` group, commands loaded lazily), options (the
shared flags), one cmd_* module per command group; each parses flags and calls the pipeline."""


def main():
    """`sf` for installs whose entry point still names launcher.cli:main."""
    from launcher.cli.app import main as app_main

    return app_main()
