"""numpy's huge-page advice, as the `primuspp` command sets it for its own process.

numpy asks the kernel to back every array of 4 MB or more with transparent huge pages (`madvise`). Where
the kernel's THP defrag mode is `madvise` (`/sys/kernel/mm/transparent_hugepage/defrag`; so on this
project's machines), the first touch of each such array may stall in a synchronous memory compaction. The
offline verbs make and drop hundreds of such arrays within seconds at p = 256 and paid more in those
stalls than in their own work (`bench/sim_scale.py --growth --pages both`: zbv at p = 256, m = 2048, 10.9
CPU s with the advice, 6.5 without). The command line (`primuspp/commands/__init__.py`) therefore turns the
advice off before numpy is imported, unless the environment already names a choice through numpy's
documented switch. The library itself never changes it: a process that imports primuspp keeps numpy's
behaviour.
"""

#: numpy's environment switch for its huge-page advice, and the command line's default for it
HUGEPAGE_ADVICE = ("NUMPY_MADVISE_HUGEPAGE", "0")
