"""An Atropos file that imports a module installed nowhere only once it runs (in `setup`): it is
listed and selected, and its run fails with the import error named (rl-mcp's tests)."""

from atroposlib.envs.base import BaseEnv, BaseEnvConfig

from tinker_atropos.environments.common import local_server_defaults


class LateImportEnv(BaseEnv):
    name = "late_import"

    @classmethod
    def config_init(cls):
        servers = local_server_defaults()
        return BaseEnvConfig(tokenizer_name=servers[0].tokenizer_name, group_size=2, use_wandb=False), servers

    async def setup(self):
        import rl_mcp_test_nowhere_module  # noqa: F401

    async def get_next_item(self):
        return None

    async def collect_trajectories(self, item):
        return None, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    LateImportEnv.cli()
