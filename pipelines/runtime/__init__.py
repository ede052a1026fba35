"""What every stage shares at run time: its command line (``params``, ``options``), one-line errors and private
logs (``commands``), counters on any runner (``stage``), output folders checked and cleared (``outputs``), files
on any file system (``files``), the shuffle through files (``spill``) and progress lines (``progress``)."""
