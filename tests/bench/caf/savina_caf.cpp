// savina-caf: the programs of bench-savina (tests/bench/bench_savina.c) on the C++ Actor
// Framework 0.17, for the comparison bench-savina --caf makes. Each program is written as
// bench_savina.c writes it (same actors, same messages, same flow control), in CAF's idiom:
// event-based actors, a scoped_actor for the main thread.
//
// Usage: savina-caf PROGRAM N THREADS
//   PROGRAM  pingpong | threadring | counting | fork-join | big | ask | trapezoid
//   N        the program's size (round trips, hops, messages, actors, pongs, asks, pieces)
//   THREADS  0: CAF's default scheduler; else scheduler.max-threads
// Prints the rate (N per second) on stdout; checks the result and exits 1 if it is wrong.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "caf/all.hpp"

using namespace caf;

using go_atom = atom_constant<atom("go")>;
using ping_atom = atom_constant<atom("ping")>;
using pong_atom = atom_constant<atom("pong")>;
using token_atom = atom_constant<atom("token")>;
using count_atom = atom_constant<atom("count")>;
using done_atom = atom_constant<atom("done")>;
using slice_atom = atom_constant<atom("slice")>;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "savina-caf: %s\n", what);
  std::exit(1);
}

// ---- pingpong ----

behavior ponger(event_based_actor* self) {
  return {[=](ping_atom) { self->send(actor_cast<actor>(self->current_sender()), ping_atom::value); }};
}

behavior pinger(event_based_actor* self, actor peer, uint64_t rounds, actor done) {
  auto seen = std::make_shared<uint64_t>(0);
  return {
      [=](go_atom) { self->send(peer, ping_atom::value); },
      [=](ping_atom) {
        if (++*seen == rounds)
          self->send(done, *seen);
        else
          self->send(peer, ping_atom::value);
      },
  };
}

// ---- threadring ----

behavior ring_node(event_based_actor* self, actor done, uint64_t target) {
  auto next = std::make_shared<actor>();
  return {
      [=](actor n) { *next = n; },
      [=](token_atom, uint64_t left) {
        if (left == 0)
          self->send(done, target);
        else
          self->send(*next, token_atom::value, left - 1);
      },
  };
}

// ---- counting: bursts of 512, the counter asks for the next one every 512 ----

behavior counter(event_based_actor* self, uint64_t target, actor done) {
  auto seen = std::make_shared<uint64_t>(0);
  return {[=](count_atom) {
    if (++*seen == target)
      self->send(done, *seen);
    else if (*seen % 512 == 0)
      self->send(actor_cast<actor>(self->current_sender()), go_atom::value);
  }};
}

behavior producer(event_based_actor* self, actor to, uint64_t target) {
  auto sent = std::make_shared<uint64_t>(0);
  return {[=](go_atom) {
    for (int i = 0; i < 512 && *sent < target; i++, ++*sent)
      self->send(to, count_atom::value);
  }};
}

// ---- fork-join: N workers, one message each; each computes, answers and quits ----

behavior fj_worker(event_based_actor* self) {
  return {[=](go_atom, actor master) {
    double sint = std::sin(37.2);
    if (sint * sint <= 0.0)
      fail("fork-join computation");
    self->send(master, done_atom::value);
    self->quit();
  }};
}

behavior fj_master(event_based_actor* self, uint64_t n, actor done) {
  auto seen = std::make_shared<uint64_t>(0);
  return {
      [=](go_atom) {
        auto me = actor_cast<actor>(self);
        for (uint64_t i = 0; i < n; i++)
          self->send(self->spawn(fj_worker), go_atom::value, me);
      },
      [=](done_atom) {
        if (++*seen == n)
          self->send(done, *seen);
      },
  };
}

// ---- big: 120 actors ping random peers, one ping at a time, and answer pongs ----

constexpr int big_actors = 120;

struct big_state {
  std::vector<actor> peers;
  uint64_t left = 0, rng = 0, pongs = 0;
};

behavior big_actor(stateful_actor<big_state>* self, uint64_t pings, actor sink, int index) {
  self->state.left = pings;
  self->state.rng = 0x9E3779B97F4A7C15ull ^ (uint64_t(index + 1) << 17);
  auto next = [=] {
    auto& s = self->state;
    if (s.left == 0) {
      self->send(sink, done_atom::value, s.pongs);
      return;
    }
    s.left--;
    s.rng ^= s.rng << 13;
    s.rng ^= s.rng >> 7;
    s.rng ^= s.rng << 17;
    self->send(s.peers[s.rng % big_actors], ping_atom::value);
  };
  return {
      [=](std::vector<actor> peers) { self->state.peers = std::move(peers); },
      [=](go_atom) { next(); },
      [=](ping_atom) { self->send(actor_cast<actor>(self->current_sender()), pong_atom::value); },
      [=](pong_atom) {
        self->state.pongs++;
        next();
      },
  };
}

behavior big_sink(event_based_actor* self, actor done) {
  auto finished = std::make_shared<int>(0);
  auto pongs = std::make_shared<uint64_t>(0);
  return {[=](done_atom, uint64_t p) {
    *pongs += p;
    if (++*finished == big_actors)
      self->send(done, *pongs);
  }};
}

// ---- ask: the main thread asks, waits, asks again ----

behavior echo(event_based_actor*) {
  return {[](uint64_t i) { return i + 1; }};
}

// ---- trapezoid: 100 workers, one slice each, computed in the handler ----

constexpr int trap_workers = 100;
constexpr double trap_left = 1.0, trap_right = 5.0;

double fx(double x) {
  double a = std::sin(std::pow(x, 3) - 1);
  double b = x + 1;
  double c = a / b;
  double d = std::sqrt(1 + std::exp(std::sqrt(2 * x)));
  return c * d;
}

double slice_area(double left, double step, uint64_t pieces) {
  double area = 0;
  for (uint64_t i = 0; i < pieces; i++) {
    double l = left + double(i) * step;
    area += 0.5 * (fx(l) + fx(l + step)) * step;
  }
  return area;
}

behavior trap_worker(event_based_actor* self, actor master) {
  return {[=](slice_atom, double left, double step, uint64_t pieces) {
    self->send(master, slice_atom::value, slice_area(left, step, pieces));
    self->quit();
  }};
}

behavior trap_master(event_based_actor* self, uint64_t n, actor done) {
  auto area = std::make_shared<double>(0);
  auto parts = std::make_shared<int>(0);
  return {
      [=](go_atom) {
        uint64_t per = n / trap_workers;
        double step = (trap_right - trap_left) / double(n);
        auto me = actor_cast<actor>(self);
        for (int i = 0; i < trap_workers; i++) {
          uint64_t first = uint64_t(i) * per;
          uint64_t pieces = i == trap_workers - 1 ? n - first : per;
          self->send(self->spawn(trap_worker, me), slice_atom::value,
                     trap_left + double(first) * step, step, pieces);
        }
      },
      [=](slice_atom, double a) {
        *area += a;
        if (++*parts == trap_workers)
          self->send(done, *area);
      },
  };
}

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Waits for the program's result (a count) and checks it.
void expect_count(scoped_actor& self, uint64_t want) {
  self->receive([&](uint64_t got) {
    if (got != want)
      fail("wrong count");
  });
}

double run(actor_system& sys, const std::string& prog, uint64_t n) {
  scoped_actor self{sys};
  actor done = actor_cast<actor>(self);
  clock_type::time_point t0;
  if (prog == "pingpong") {
    auto pong = sys.spawn(ponger);
    auto ping = sys.spawn(pinger, pong, n, done);
    t0 = clock_type::now();
    self->send(ping, go_atom::value);
    expect_count(self, n);
  } else if (prog == "threadring") {
    std::vector<actor> ring;
    for (int i = 0; i < 503; i++)
      ring.push_back(sys.spawn(ring_node, done, n));
    for (int i = 0; i < 503; i++)
      self->send(ring[i], ring[(i + 1) % 503]);
    t0 = clock_type::now();
    self->send(ring[0], token_atom::value, n);
    expect_count(self, n);
    double rate = double(n) / seconds_since(t0);
    for (auto& a : ring) // a cycle of references: never collected, stopped here
      self->send_exit(a, exit_reason::user_shutdown);
    return rate;
  } else if (prog == "counting") {
    auto c = sys.spawn(counter, n, done);
    auto p = sys.spawn(producer, c, n);
    t0 = clock_type::now();
    self->send(p, go_atom::value);
    expect_count(self, n);
  } else if (prog == "fork-join") {
    auto m = sys.spawn(fj_master, n, done);
    t0 = clock_type::now();
    self->send(m, go_atom::value);
    expect_count(self, n);
  } else if (prog == "big") {
    uint64_t pings = n / big_actors;
    auto sink = sys.spawn(big_sink, done);
    std::vector<actor> peers;
    for (int i = 0; i < big_actors; i++)
      peers.push_back(sys.spawn(big_actor, pings, sink, i));
    for (auto& a : peers)
      self->send(a, peers);
    t0 = clock_type::now();
    for (auto& a : peers)
      self->send(a, go_atom::value);
    expect_count(self, pings * big_actors);
    double rate = double(n) / seconds_since(t0);
    for (auto& a : peers) // each holds all the others: stopped here
      self->send_exit(a, exit_reason::user_shutdown);
    return rate;
  } else if (prog == "ask") {
    auto e = sys.spawn(echo);
    t0 = clock_type::now();
    for (uint64_t i = 0; i < n; i++)
      self->request(e, infinite, i)
          .receive(
              [&](uint64_t r) {
                if (r != i + 1)
                  fail("ask: a wrong answer");
              },
              [&](error&) { fail("ask: an error"); });
  } else if (prog == "trapezoid") {
    auto m = sys.spawn(trap_master, n, done);
    t0 = clock_type::now();
    self->send(m, go_atom::value);
    double area = 0;
    self->receive([&](double a) { area = a; });
    double s = seconds_since(t0);
    double ref = slice_area(trap_left, (trap_right - trap_left) / double(n), n);
    if (!(std::fabs(area - ref) <= 1e-9 * std::fabs(ref)))
      fail("trapezoid: wrong area");
    return double(n) / s;
  } else {
    fail("unknown program");
  }
  return double(n) / seconds_since(t0);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PROGRAM N THREADS\n", argv[0]);
    return 2;
  }
  std::string prog = argv[1];
  uint64_t n = std::strtoull(argv[2], nullptr, 10);
  int threads = std::atoi(argv[3]);
  actor_system_config cfg;
  if (threads > 0)
    cfg.set("scheduler.max-threads", size_t(threads));
  double rate;
  {
    actor_system sys{cfg};
    rate = run(sys, prog, n);
  }
  std::printf("%.1f\n", rate);
  return 0;
}
