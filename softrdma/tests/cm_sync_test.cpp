// The connection manager's synchronous API: rdma_getaddrinfo, rdma_create_ep (passive with
// the QP attributes of every accepted connection, active with its own QP), rdma_listen,
// rdma_get_request, rdma_connect / rdma_accept that block until ESTABLISHED, and the
// rdma_verbs.h helpers (rdma_reg_msgs, rdma_post_send/recv, rdma_get_send/recv_comp).
//
// These calls block without a timeout of their own; a Watchdog bounds each test.
#include <rdma/rdma_verbs.h>

#include <future>

#include "cm_fixture.hpp"

namespace softrdma_test {
namespace {

constexpr Millis kWatchdog{20000};

ibv_qp_init_attr endpoint_qp_attr() {
  ibv_qp_init_attr attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;
  attr.cap.max_send_wr = 4;
  attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  return attr;
}

/// rdma_getaddrinfo for 127.0.0.1:port, passive (RAI_PASSIVE) or active.
rdma_addrinfo* address_info(uint16_t port, bool passive) {
  rdma_addrinfo hints{};
  hints.ai_flags = passive ? RAI_PASSIVE : 0;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (rdma_getaddrinfo("127.0.0.1", service.c_str(), &hints, &res) != 0) {
    ADD_FAILURE() << "rdma_getaddrinfo: " << std::strerror(errno);
    return nullptr;
  }
  return res;
}

/// A passive endpoint on 127.0.0.1 (a free port, returned in *port) that listens.
rdma_cm_id* listening_endpoint(uint16_t* port, ibv_qp_init_attr* child_attr) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    *port = free_port();
    rdma_addrinfo* res = address_info(*port, true);
    if (!res) return nullptr;
    EXPECT_EQ(res->ai_flags & RAI_PASSIVE, RAI_PASSIVE);
    EXPECT_EQ(res->ai_port_space, RDMA_PS_TCP);
    EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
    EXPECT_NE(res->ai_src_addr, nullptr);
    rdma_cm_id* id = nullptr;
    const int rc = rdma_create_ep(&id, res, nullptr, child_attr);
    rdma_freeaddrinfo(res);
    if (rc != 0) continue;  // the port was taken meanwhile
    if (rdma_listen(id, 4) != 0) {
      ADD_FAILURE() << "rdma_listen: " << std::strerror(errno);
      rdma_destroy_ep(id);
      return nullptr;
    }
    return id;
  }
  ADD_FAILURE() << "rdma_create_ep (passive): no free port";
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// 10. A send/recv round trip between two endpoints, each side in its own thread.

TEST(CmSync, EndpointsConnectAndExchangeMessages) {
  Watchdog watchdog(kWatchdog, "CmSync.EndpointsConnectAndExchangeMessages");
  ibv_qp_init_attr child_attr = endpoint_qp_attr();
  uint16_t port = 0;
  rdma_cm_id* listen_id = listening_endpoint(&port, &child_attr);
  ASSERT_NE(listen_id, nullptr);
  EXPECT_EQ(listen_id->qp, nullptr) << "a passive endpoint has no QP of its own";

  constexpr size_t kLength = 64;
  const std::vector<uint8_t> ping = pattern(kLength, 0x11), pong = pattern(kLength, 0x99);

  std::thread server([&] {
    rdma_cm_id* id = nullptr;
    if (rdma_get_request(listen_id, &id) != 0) {
      ADD_FAILURE() << "rdma_get_request: " << std::strerror(errno);
      return;
    }
    EXPECT_NE(id, listen_id);
    ASSERT_NE(id->qp, nullptr) << "the endpoint's QP attributes give every request a QP";
    EXPECT_EQ(qp_state(id->qp), IBV_QPS_INIT);
    std::vector<uint8_t> in(kLength), out(pong);
    ibv_mr* in_mr = rdma_reg_msgs(id, in.data(), kLength);
    ibv_mr* out_mr = rdma_reg_msgs(id, out.data(), kLength);
    ASSERT_TRUE(in_mr && out_mr) << "rdma_reg_msgs: " << std::strerror(errno);
    EXPECT_EQ(rdma_post_recv(id, nullptr, in.data(), kLength, in_mr), 0);
    EXPECT_EQ(rdma_accept(id, nullptr), 0) << "rdma_accept: " << std::strerror(errno);
    EXPECT_EQ(qp_state(id->qp), IBV_QPS_RTS);
    ibv_wc wc{};
    EXPECT_EQ(rdma_get_recv_comp(id, &wc), 1);
    EXPECT_TRUE(completed(wc, 0));
    EXPECT_EQ(wc.byte_len, kLength);
    EXPECT_EQ(in, ping);
    EXPECT_EQ(rdma_post_send(id, &wc, out.data(), kLength, out_mr, IBV_SEND_SIGNALED), 0);
    EXPECT_EQ(rdma_get_send_comp(id, &wc), 1);
    EXPECT_TRUE(completed(wc, reinterpret_cast<uintptr_t>(&wc)));
    EXPECT_EQ(rdma_disconnect(id), 0) << "rdma_disconnect: " << std::strerror(errno);
    EXPECT_EQ(rdma_dereg_mr(in_mr), 0);
    EXPECT_EQ(rdma_dereg_mr(out_mr), 0);
    rdma_destroy_ep(id);
  });

  rdma_addrinfo* res = address_info(port, false);
  ASSERT_NE(res, nullptr);
  EXPECT_NE(res->ai_dst_addr, nullptr);
  ibv_qp_init_attr attr = endpoint_qp_attr();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &attr), 0) << std::strerror(errno);
  rdma_freeaddrinfo(res);
  ASSERT_NE(id->qp, nullptr);
  EXPECT_EQ(qp_state(id->qp), IBV_QPS_INIT);
  std::vector<uint8_t> in(kLength), out(ping);
  ibv_mr* in_mr = rdma_reg_msgs(id, in.data(), kLength);
  ibv_mr* out_mr = rdma_reg_msgs(id, out.data(), kLength);
  ASSERT_TRUE(in_mr && out_mr) << "rdma_reg_msgs: " << std::strerror(errno);
  EXPECT_EQ(rdma_post_recv(id, nullptr, in.data(), kLength, in_mr), 0);
  ASSERT_EQ(rdma_connect(id, nullptr), 0) << "rdma_connect: " << std::strerror(errno);
  EXPECT_EQ(qp_state(id->qp), IBV_QPS_RTS);
  EXPECT_EQ(rdma_post_send(id, nullptr, out.data(), kLength, out_mr, IBV_SEND_SIGNALED), 0);
  ibv_wc wc{};
  EXPECT_EQ(rdma_get_send_comp(id, &wc), 1);
  EXPECT_TRUE(completed(wc, 0));
  EXPECT_EQ(rdma_get_recv_comp(id, &wc), 1);
  EXPECT_TRUE(completed(wc, 0));
  EXPECT_EQ(wc.byte_len, kLength);
  EXPECT_EQ(in, pong);
  server.join();
  EXPECT_EQ(rdma_disconnect(id), 0) << "rdma_disconnect: " << std::strerror(errno);
  EXPECT_EQ(rdma_dereg_mr(in_mr), 0);
  EXPECT_EQ(rdma_dereg_mr(out_mr), 0);
  rdma_destroy_ep(id);
  rdma_destroy_ep(listen_id);
}

// ---------------------------------------------------------------------------------------------
// librdmacm leaves the last event of a synchronous call on the id: rdma_get_request's
// CONNECT_REQUEST on the new id, rdma_connect's ESTABLISHED on the connecting id, so the
// application can read the peer's private data.

TEST(CmSync, EventsOfSynchronousCallsStayOnTheId) {
  Watchdog watchdog(kWatchdog, "CmSync.EventsOfSynchronousCallsStayOnTheId");
  ibv_qp_init_attr child_attr = endpoint_qp_attr();
  uint16_t port = 0;
  rdma_cm_id* listen_id = listening_endpoint(&port, &child_attr);
  ASSERT_NE(listen_id, nullptr);
  const std::vector<uint8_t> hello = pattern(40, 0x23), welcome = pattern(120, 0x67);

  struct ClientView {
    int rc = -1;
    bool has_event = false;
    rdma_cm_event_type type{};
    std::vector<uint8_t> private_data;
  };
  std::promise<ClientView> client_view;
  std::promise<void> server_done;
  std::thread client([&] {
    ClientView view;
    rdma_addrinfo* res = address_info(port, false);
    ibv_qp_init_attr attr = endpoint_qp_attr();
    rdma_cm_id* id = nullptr;
    if (!res || rdma_create_ep(&id, res, nullptr, &attr) != 0) {
      ADD_FAILURE() << "rdma_create_ep (active): " << std::strerror(errno);
      if (res) rdma_freeaddrinfo(res);
      client_view.set_value(view);
      return;
    }
    rdma_freeaddrinfo(res);
    rdma_conn_param param = conn_param(hello);
    view.rc = rdma_connect(id, &param);
    if (id->event) {
      view.has_event = true;
      view.type = id->event->event;
      const auto* data = static_cast<const uint8_t*>(id->event->param.conn.private_data);
      if (data) view.private_data.assign(data, data + id->event->param.conn.private_data_len);
    }
    client_view.set_value(view);
    server_done.get_future().wait();
    rdma_disconnect(id);
    rdma_destroy_ep(id);
  });

  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_get_request(listen_id, &id), 0) << std::strerror(errno);
  const bool server_has_event = id->event != nullptr;
  rdma_cm_event_type server_type{};
  std::vector<uint8_t> server_data;
  if (server_has_event) {
    server_type = id->event->event;
    EXPECT_EQ(id->event->id, id);
    EXPECT_EQ(id->event->listen_id, listen_id);
    const auto* data = static_cast<const uint8_t*>(id->event->param.conn.private_data);
    if (data) server_data.assign(data, data + id->event->param.conn.private_data_len);
  }
  rdma_conn_param param = conn_param(welcome);
  EXPECT_EQ(rdma_accept(id, &param), 0) << std::strerror(errno);
  const ClientView view = client_view.get_future().get();
  server_done.set_value();
  client.join();
  rdma_disconnect(id);
  rdma_destroy_ep(id);
  rdma_destroy_ep(listen_id);

  ASSERT_EQ(view.rc, 0) << "rdma_connect";
  ASSERT_TRUE(server_has_event) << "rdma_get_request left no event on the new id";
  EXPECT_EQ(server_type, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_TRUE(starts_with(server_data, hello));
  ASSERT_TRUE(view.has_event) << "rdma_connect left no event on the id";
  EXPECT_EQ(view.type, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_TRUE(starts_with(view.private_data, welcome));
}

// ---------------------------------------------------------------------------------------------
// RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (0xFF) ask for the device's maximum; other values
// above it are refused before anything is sent.

TEST(CmSync, MaximumReadAndAtomicDepthsAskForTheDevicesLimit) {
  Watchdog watchdog(kWatchdog, "CmSync.MaximumReadAndAtomicDepthsAskForTheDevicesLimit");
  ibv_qp_init_attr child_attr = endpoint_qp_attr();
  uint16_t port = 0;
  rdma_cm_id* listen_id = listening_endpoint(&port, &child_attr);
  ASSERT_NE(listen_id, nullptr);
  rdma_conn_param most = conn_param({});
  most.responder_resources = RDMA_MAX_RESP_RES;
  most.initiator_depth = RDMA_MAX_INIT_DEPTH;

  std::thread server([&] {
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(rdma_get_request(listen_id, &id), 0) << std::strerror(errno);
    rdma_conn_param accept = most;
    EXPECT_EQ(rdma_accept(id, &accept), 0) << std::strerror(errno);
    rdma_disconnect(id);
    rdma_destroy_ep(id);
  });
  rdma_addrinfo* res = address_info(port, false);
  ASSERT_NE(res, nullptr);
  ibv_qp_init_attr attr = endpoint_qp_attr();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_ep(&id, res, nullptr, &attr), 0) << std::strerror(errno);
  rdma_freeaddrinfo(res);
  ibv_device_attr device{};
  ASSERT_EQ(ibv_query_device(id->verbs, &device), 0);
  rdma_conn_param too_many = conn_param({});
  too_many.initiator_depth = static_cast<uint8_t>(device.max_qp_init_rd_atom + 1);
  EXPECT_EQ(rdma_connect(id, &too_many), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_connect(id, &most), 0) << std::strerror(errno);
  ibv_qp_attr qp{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(id->qp, &qp, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &init),
            0);
  EXPECT_EQ(qp.max_rd_atomic, device.max_qp_init_rd_atom);
  EXPECT_EQ(qp.max_dest_rd_atomic, device.max_qp_rd_atom);
  server.join();
  rdma_disconnect(id);
  rdma_destroy_ep(id);
  rdma_destroy_ep(listen_id);
}

// ---------------------------------------------------------------------------------------------
// rdma_getaddrinfo without node or service takes the addresses the hints carry.

TEST(CmSync, GetaddrinfoWithoutANameTakesTheHintsAddresses) {
  sockaddr_in src{}, dst{};
  src.sin_family = dst.sin_family = AF_INET;
  src.sin_addr.s_addr = dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  src.sin_port = htons(7001);
  dst.sin_port = htons(7002);
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_src_addr = reinterpret_cast<sockaddr*>(&src);
  hints.ai_src_len = sizeof src;
  hints.ai_dst_addr = reinterpret_cast<sockaddr*>(&dst);
  hints.ai_dst_len = sizeof dst;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0) << std::strerror(errno);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  ASSERT_TRUE(res->ai_src_addr && res->ai_dst_addr);
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
  EXPECT_EQ(std::memcmp(res->ai_dst_addr, &dst, sizeof dst), 0);
  rdma_freeaddrinfo(res);

  rdma_addrinfo nothing{};
  res = nullptr;
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, &nothing, &res), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softrdma_test
