// What the connection manager needs from the verbs side: the device context it hands out
// (the one softrdma device, opened once), default PDs, GIDs for IP addresses, and the QP
// attributes of each connection step.
#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>

#include <cstdint>

#include "cm/cm_objects.hpp"

namespace softrdma::cm {

/// The device context every id of this process uses (opened on first use), or nullptr.
ibv_context* cm_context();
/// The PD rdma_create_qp uses when the application passes none.
ibv_pd* default_pd(ibv_context* ctx);
/// Binds `id` to the device, as librdmacm does once an address names it: verbs, port and
/// the device's default PD (programs use id->pd before they create a QP).
void attach_to_device(rdma_cm_id* id);

/// GID index of the id's source address in the device's GID table (0 if not found).
uint8_t local_gid_index(const CmId* id);
/// The GID (::ffff:a.b.c.d) of an IPv4 socket address.
void gid_of(const sockaddr* addr, uint8_t gid[16]);
/// An address vector towards `gid` from GID index `sgid_index`.
ibv_ah_attr address_to(ibv_context* ctx, const uint8_t gid[16], uint8_t sgid_index);

/// Fills the attributes that move `id`'s QP to attr->qp_state (INIT, RTR or RTS) and their
/// mask, from what the connection negotiated. 0 or an errno.
int connection_qp_attr(CmId* id, ibv_qp_attr* attr, int* mask);
/// Moves the id's QP through INIT (if needed), RTR and RTS. 0 or an errno.
int connect_qp(CmId* id);

/// An event channel; `owner` (if not null) is the synchronous id it is private to.
EventChannel* new_channel(const CmId* owner);
void delete_channel(EventChannel* ch);

}  // namespace softrdma::cm
