"""Print pod changes from every context of a kubeconfig (the README's quickstart).

    python examples/watch_pods.py [KUBECONFIG]

Runs until interrupted. `tests/test_examples.py` runs it against FakeClusters.
"""

from __future__ import annotations

import sys

import anyio

import kubemux


async def main(kubeconfig: str | None = None, limit: int | None = None) -> None:
    async with kubemux.WatcherRegistry.from_kubeconfig(kubeconfig, autowatch=["pods"]) as registry:
        print("contexts:", ", ".join(registry.contexts), "| current:", registry.current_context)
        seen = 0
        async with registry.subscribe("pods") as changes:
            async for change in changes:
                print(f"{change.context:12} {change.type:9} {change.namespace}/{change.name}")
                seen += 1
                if limit is not None and seen >= limit:
                    return


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else None)
