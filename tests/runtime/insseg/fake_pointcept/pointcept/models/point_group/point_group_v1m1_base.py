"""Stand-in for pointcept.models.point_group.point_group_v1m1_base (test-only).

PointGroup here has the real attribute names (backbone, bias_head, seg_head,
voxel_size, segment_ignore_index, cluster_* settings) and the real eval branch's
dense steps: scatter proposals_idx into an int32 [n_clusters, N] tensor, keep
clusters with more than cluster_propose_points points, class = predicted segment
of the cluster's first listed point, score = mean softmax probability over its
points. The CUDA clustering ops are replaced by brute-force CPU versions with the
same signatures and output layout.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def offset2batch(offset):
    counts = torch.diff(offset, prepend=offset.new_zeros(1))
    return torch.repeat_interleave(torch.arange(len(offset)), counts.long())


def batch2offset(batch):
    return torch.cumsum(batch.bincount(), dim=0).long()


def ballquery_batch_p(coords, batch_idxs, batch_offsets, radius, mean_active):
    """-> (idx flat neighbour list, start_len [n, 2]) as pointgroup_ops returns them."""
    close = (torch.cdist(coords, coords) <= radius) & (batch_idxs[:, None] == batch_idxs[None, :])
    idx = torch.nonzero(close)[:, 1].int()
    lens = close.sum(1).int()
    starts = torch.cumsum(lens, 0).int() - lens
    return idx, torch.stack([starts, lens], 1)


def bfs_cluster(semantic_label, ball_query_idxs, start_len, threshold):
    """-> (cluster_idxs [K, 2] (cluster, point), cluster_offsets [C+1]) over same-label neighbours."""
    n = semantic_label.shape[0]
    seen = torch.zeros(n, dtype=torch.bool)
    rows, offsets = [], [0]
    for seed in range(n):
        if seen[seed]:
            continue
        seen[seed] = True
        queue, members = [seed], []
        while queue:
            p = queue.pop()
            members.append(p)
            s, ln = start_len[p].tolist()
            for q in ball_query_idxs[s : s + ln].tolist():
                if not seen[q] and semantic_label[q] == semantic_label[p]:
                    seen[q] = True
                    queue.append(q)
        if len(members) >= threshold:
            cid = len(offsets) - 1
            rows += [[cid, m] for m in members]
            offsets.append(offsets[-1] + len(members))
    return torch.tensor(rows, dtype=torch.int).reshape(-1, 2), torch.tensor(offsets, dtype=torch.int)


class PointGroup(nn.Module):
    def __init__(
        self,
        in_channels=3,
        backbone_out_channels=8,
        semantic_num_classes=5,
        segment_ignore_index=(-1, 0),
        cluster_thresh=1.5,
        cluster_closed_points=300,
        cluster_propose_points=10,
        cluster_min_points=5,
        voxel_size=0.5,
    ):
        super().__init__()
        self.semantic_num_classes = semantic_num_classes
        self.segment_ignore_index = segment_ignore_index
        self.cluster_thresh = cluster_thresh
        self.cluster_closed_points = cluster_closed_points
        self.cluster_propose_points = cluster_propose_points
        self.cluster_min_points = cluster_min_points
        self.voxel_size = voxel_size
        self.backbone = nn.Linear(in_channels, backbone_out_channels)
        self.bias_head = nn.Sequential(
            nn.Linear(backbone_out_channels, backbone_out_channels),
            nn.ReLU(),
            nn.Linear(backbone_out_channels, 3),
        )
        self.seg_head = nn.Linear(backbone_out_channels, semantic_num_classes)
        self.ce_criteria = nn.CrossEntropyLoss(ignore_index=-1)

    def forward(self, data_dict):
        coord = data_dict["coord"]
        offset = data_dict["offset"]
        feat = self.backbone(data_dict["feat"])
        bias_pred = self.bias_head(feat)
        logit_pred = self.seg_head(feat)
        return_dict = {"loss": self.ce_criteria(logit_pred, data_dict["segment"])}
        if not self.training:
            center_pred = coord + bias_pred
            center_pred /= self.voxel_size
            logit_pred = F.softmax(logit_pred, dim=-1)
            segment_pred = torch.max(logit_pred, 1)[1]
            mask = (
                ~torch.concat([(segment_pred == i).unsqueeze(-1) for i in self.segment_ignore_index], dim=1)
                .sum(-1)
                .bool()
            )
            batch_ = offset2batch(offset)[mask]
            offset_ = nn.ConstantPad1d((1, 0), 0)(batch2offset(batch_))
            idx, start_len = ballquery_batch_p(
                center_pred[mask],
                batch_.int(),
                offset_.int(),
                self.cluster_thresh,
                self.cluster_closed_points,
            )
            proposals_idx, proposals_offset = bfs_cluster(
                segment_pred[mask].int().cpu(), idx.cpu(), start_len.cpu(), self.cluster_min_points
            )
            proposals_idx[:, 1] = mask.nonzero().view(-1)[proposals_idx[:, 1].long()].int()
            dense = torch.zeros((proposals_offset.shape[0] - 1, center_pred.shape[0]), dtype=torch.int)
            dense[proposals_idx[:, 0].long(), proposals_idx[:, 1].long()] = 1
            instance_pred = segment_pred[proposals_idx[:, 1][proposals_offset[:-1].long()].long()]
            keep = dense.sum(1) > self.cluster_propose_points
            dense, instance_pred = dense[keep], instance_pred[keep]
            scores = [logit_pred[dense[k].bool(), instance_pred[k]].mean() for k in range(len(dense))]
            return_dict["pred_scores"] = torch.stack(scores).cpu() if scores else torch.tensor([])
            return_dict["pred_classes"] = instance_pred.cpu() if scores else torch.tensor([])
            return_dict["pred_masks"] = dense.detach().cpu()
        return return_dict
