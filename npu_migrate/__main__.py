from npu_migrate.cli import app

app(prog_name="npu-migrate")
