// Package faults is the fault suite of seckill: its tests run the service
// as real processes on loopback (API instances, order workers, redis-server)
// and break them while a crowd grabs: kill -9 and SIGSTOP of workers and
// API instances, Redis killed and restarted with and without persistence,
// Redis and the database slowed or cut through an in-process TCP proxy, a
// lock holder paused past its lease, Redlock nodes restarted. After each
// fault the invariant checker (package check) runs against what the crowd
// was told, and the test prints its table and fails on any violation. The
// lock tests check mutual exclusion on recorded histories with a
// linearizability checker (porcupine).
//
// Every checker is shown to catch a broken variant: a lock without the
// fencing check, Redlock with a node restarted at once without
// persistence, hand-made histories, and a real sale's database tampered
// with after the fact.
//
// The soak, the long run of the same faults, is package soak. The tests
// build cmd/seckill once per run; SECKILL_FAULTS_BIN names a prebuilt
// binary instead.
package faults
