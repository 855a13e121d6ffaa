"""An environment for ToolRunner.APinnedCallWhoseWorkerCannotStartAgainFailsWithTheReason
(tests/rollout/test_tools.cpp): crash() leaves the marker file named by UNSTUCK_TEST_CRASH_MARKER and
ends its worker's process, and a worker that finds the marker refuses to start (this module's import
raises), so the crashed worker cannot come back while the other one lives on.
"""

import os

_marker = os.environ.get("UNSTUCK_TEST_CRASH_MARKER", "")
if _marker and os.path.exists(_marker):
    raise RuntimeError("the crash marker is set: this worker does not start again")


class CrashEnv:
    def reset(self, **kwargs) -> None:
        self.pid = os.getpid()

    def crash(self) -> str:
        """
        Ends the process that holds this instance.

        Returns:
            Nothing: the process ends first.
        """
        open(_marker, "w").close()
        os._exit(3)

    def where(self) -> int:
        """
        Says which process holds this instance.

        Returns:
            The process id.
        """
        return self.pid
