"""Writes, one line per case ("n world rank seed epoch shuffle drop_last : indices..."), the indices of torch's DistributedSampler for many
(n, world, rank, seed, epoch, shuffle, drop_last) combinations."""
import sys

from torch.utils.data.distributed import DistributedSampler


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


cases = []
for n in [0, 1, 2, 5, 7, 10, 11, 64, 100, 1001]:
    for world in [1, 2, 3, 4, 7]:
        for shuffle in [True, False]:
            for drop_last in [False, True]:
                for seed, epoch in [(0, 0), (0, 3), (42, 1)]:
                    if drop_last and n < world and n == 0:
                        continue
                    for rank in range(world):
                        s = DistributedSampler(Sized(n), num_replicas=world, rank=rank,
                                               shuffle=shuffle, seed=seed, drop_last=drop_last)
                        s.set_epoch(epoch)
                        head = [n, world, rank, seed, epoch, int(shuffle), int(drop_last)]
                        cases.append(" ".join(map(str, head)) + " : " +
                                     " ".join(map(str, iter(s))))
with open(sys.argv[1], "w") as f:
    for c in cases:
        f.write(c + "\n")
