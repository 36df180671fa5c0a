package rendezvous

import (
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/config"
)

func TestFromEnv(t *testing.T) {
	type vars = map[string]string
	tests := []struct {
		name string
		env  vars
		want Env
		ok   bool
		err  string // substring of the error; "" for none
	}{
		{name: "nothing", env: vars{}, ok: false},
		{name: "only store addr", env: vars{"GOCCL_STORE_ADDR": "h:1", "WORLD_SIZE": "4", "MASTER_ADDR": "x"}, ok: false},
		{name: "empty values count as unset", env: vars{"GOCCL_RANK": "", "RANK": ""}, ok: false},
		{
			name: "goccl",
			env: vars{"GOCCL_RANK": "2", "GOCCL_WORLD_SIZE": "4", "GOCCL_LOCAL_RANK": "0",
				"GOCCL_STORE_ADDR": "10.0.0.1:29500", "GOCCL_STORE_DIR": "/shared/x", "GOCCL_JOB_ID": "job7"},
			want: Env{Rank: 2, WorldSize: 4, LocalRank: 0, StoreAddr: "10.0.0.1:29500", StoreDir: "/shared/x", JobID: "job7", Source: "goccl"},
			ok:   true,
		},
		{
			name: "goccl without local rank",
			env:  vars{"GOCCL_RANK": "1", "GOCCL_WORLD_SIZE": "2"},
			want: Env{Rank: 1, WorldSize: 2, Source: "goccl"}, ok: true,
		},
		{
			name: "torchrun",
			env: vars{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
				"TORCHELASTIC_RUN_ID": "run-1"},
			want: Env{Rank: 3, WorldSize: 8, LocalRank: 3, StoreAddr: "node0:29500", JobID: "run-1", Source: "torchrun"},
			ok:   true,
		},
		{
			name: "torchrun agent store",
			env: vars{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
				"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "2"},
			want: Env{Rank: 1, WorldSize: 2, StoreAddr: "node0:29500", AgentStore: "node0:29500", Attempt: "2", Source: "torchrun"},
			ok:   true,
		},
		{
			name: "torchrun agent store off",
			env: vars{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
				"TORCHELASTIC_USE_AGENT_STORE": "False"},
			want: Env{Rank: 1, WorldSize: 2, StoreAddr: "node0:29500", Source: "torchrun"},
			ok:   true,
		},
		{
			name: "goccl store addr wins over the agent store",
			env: vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500",
				"TORCHELASTIC_USE_AGENT_STORE": "True", "GOCCL_STORE_ADDR": "node1:7000"},
			want: Env{Rank: 0, WorldSize: 2, StoreAddr: "node1:7000", Source: "torchrun"},
			ok:   true,
		},
		{
			name: "torchrun ipv6 master",
			env:  vars{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "fd00::1", "MASTER_PORT": "1234"},
			want: Env{Rank: 0, WorldSize: 1, StoreAddr: "[fd00::1]:1234", Source: "torchrun"}, ok: true,
		},
		{
			name: "torchrun master addr without port",
			env:  vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node0"},
			want: Env{Rank: 0, WorldSize: 2, Source: "torchrun"}, ok: true,
		},
		{
			name: "openmpi",
			env: vars{"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
				"OMPI_MCA_ess_base_jobid": "123456", "PMIX_NAMESPACE": "prterun-x-1@1", "OMPI_MCA_orte_ess_jobid": "999"},
			want: Env{Rank: 5, WorldSize: 6, LocalRank: 1, JobID: "123456", Source: "openmpi"}, ok: true,
		},
		{
			name: "openmpi pmix namespace",
			env: vars{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
				"PMIX_NAMESPACE": "prterun-x-1@1", "OMPI_MCA_orte_ess_jobid": "999"},
			want: Env{Rank: 0, WorldSize: 2, JobID: "prterun-x-1@1", Source: "openmpi"}, ok: true,
		},
		{
			name: "openmpi orte jobid",
			env: vars{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
				"OMPI_MCA_orte_ess_jobid": "999"},
			want: Env{Rank: 0, WorldSize: 2, JobID: "999", Source: "openmpi"}, ok: true,
		},
		{
			name: "slurm",
			env: vars{"SLURM_PROCID": "7", "SLURM_NTASKS": "16", "SLURM_LOCALID": "3", "SLURM_JOB_ID": "4242",
				"SLURM_STEP_ID": "0"},
			want: Env{Rank: 7, WorldSize: 16, LocalRank: 3, JobID: "4242.0", Source: "slurm"}, ok: true,
		},
		{
			name: "slurm without step",
			env:  vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "4242"},
			want: Env{Rank: 0, WorldSize: 1, JobID: "4242", Source: "slurm"}, ok: true,
		},
		{
			name: "goccl beats torchrun",
			env: vars{"GOCCL_RANK": "1", "GOCCL_WORLD_SIZE": "2", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
				"MASTER_ADDR": "m", "MASTER_PORT": "1"},
			want: Env{Rank: 1, WorldSize: 2, StoreAddr: "m:1", Source: "goccl"}, ok: true,
		},
		{
			// What goccl run gives each rank: its own variables, torchrun's and
			// OpenMPI's, and no MASTER_ADDR/MASTER_PORT.
			name: "goccl run's variables: goccl's win",
			env: vars{config.Rank.Name: "1", config.WorldSize.Name: "2", config.LocalRank.Name: "1", config.LocalWorldSize.Name: "2",
				config.StoreAddr.Name: "127.0.0.1:4242", config.JobID.Name: "j1",
				"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
				"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
			want: Env{Rank: 1, WorldSize: 2, LocalRank: 1, StoreAddr: "127.0.0.1:4242", JobID: "j1", Source: "goccl"}, ok: true,
		},
		{
			name: "torchrun beats openmpi and slurm",
			env: vars{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "OMPI_COMM_WORLD_RANK": "0",
				"OMPI_COMM_WORLD_SIZE": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "9"},
			want: Env{Rank: 1, WorldSize: 2, LocalRank: 1, JobID: "9", Source: "torchrun"}, ok: true,
		},
		{
			name: "openmpi beats slurm (mpirun inside an allocation)",
			env: vars{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
				"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "2"},
			want: Env{Rank: 3, WorldSize: 4, LocalRank: 1, JobID: "77.2", Source: "openmpi"}, ok: true,
		},
		{
			name: "GOCCL overrides under a launcher",
			env: vars{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
				"GOCCL_LOCAL_RANK": "2", "GOCCL_STORE_ADDR": ":29500", "MASTER_ADDR": "m", "MASTER_PORT": "2",
				"GOCCL_STORE_DIR": "/nfs/d", "GOCCL_JOB_ID": "mine", "OMPI_MCA_ess_base_jobid": "1"},
			want: Env{Rank: 3, WorldSize: 4, LocalRank: 2, StoreAddr: ":29500", StoreDir: "/nfs/d", JobID: "mine", Source: "openmpi"},
			ok:   true,
		},
		{
			name: "torchrun world size alone is not torchrun",
			env:  vars{"WORLD_SIZE": "8", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"},
			want: Env{Rank: 1, WorldSize: 2, Source: "slurm"}, ok: true,
		},
		{
			name: "whitespace tolerated",
			env:  vars{"GOCCL_RANK": " 1 ", "GOCCL_WORLD_SIZE": "2\n"},
			want: Env{Rank: 1, WorldSize: 2, Source: "goccl"}, ok: true,
		},

		// Errors: each names the variable and its value.
		{name: "rank >= world size", env: vars{"GOCCL_RANK": "4", "GOCCL_WORLD_SIZE": "4"}, ok: true, err: "GOCCL_RANK=4"},
		{name: "negative rank", env: vars{"RANK": "-1", "WORLD_SIZE": "4"}, ok: true, err: "RANK=-1"},
		{name: "non-numeric rank", env: vars{"OMPI_COMM_WORLD_RANK": "one", "OMPI_COMM_WORLD_SIZE": "4"}, ok: true, err: `OMPI_COMM_WORLD_RANK="one"`},
		{name: "non-numeric size", env: vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "4x"}, ok: true, err: `SLURM_NTASKS="4x"`},
		{name: "zero world size", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "0"}, ok: true, err: "GOCCL_WORLD_SIZE=0"},
		{name: "negative world size", env: vars{"RANK": "0", "WORLD_SIZE": "-2"}, ok: true, err: "WORLD_SIZE=-2"},
		{name: "overflowing rank", env: vars{"RANK": "99999999999999999999", "WORLD_SIZE": "2"}, ok: true, err: `RANK="99999999999999999999"`},
		{name: "missing world size", env: vars{"GOCCL_RANK": "0"}, ok: true, err: "GOCCL_WORLD_SIZE is not"},
		{name: "missing rank", env: vars{"GOCCL_WORLD_SIZE": "2"}, ok: true, err: "GOCCL_RANK is not"},
		{name: "torchrun missing world size", env: vars{"RANK": "0"}, ok: true, err: "WORLD_SIZE is not"},
		{name: "local rank out of range", env: vars{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2"}, ok: true, err: "LOCAL_RANK=2"},
		{name: "negative local rank", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "2", "GOCCL_LOCAL_RANK": "-1"}, ok: true, err: "GOCCL_LOCAL_RANK=-1"},
		{name: "non-numeric local rank", env: vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "a"}, ok: true, err: `SLURM_LOCALID="a"`},
		{name: "bad store addr", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE_ADDR": "nohostport"}, ok: true, err: `GOCCL_STORE_ADDR="nohostport"`},
		{name: "store addr port 0", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE_ADDR": "h:0"}, ok: true, err: `GOCCL_STORE_ADDR="h:0"`},
		{name: "store addr named port", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE_ADDR": "h:http"}, ok: true, err: `GOCCL_STORE_ADDR="h:http"`},
		{
			name: "GOCCL_STORE etcd overrides the store address and the agent store",
			env: vars{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
				"GOCCL_STORE_ADDR": "node1:7000", "GOCCL_STORE": "etcd://e1:2379,e2:2379/jobs"},
			want: Env{Rank: 1, WorldSize: 2, Etcd: "etcd://e1:2379,e2:2379/jobs", Source: "torchrun"},
			ok:   true,
		},
		{
			name: "GOCCL_STORE tcp",
			env:  vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "2", "GOCCL_STORE_ADDR": "node1:7000", "GOCCL_STORE": "tcp://node2:7001"},
			want: Env{Rank: 0, WorldSize: 2, StoreAddr: "node2:7001", Source: "goccl"},
			ok:   true,
		},
		{
			name: "GOCCL_STORE file",
			env:  vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "2", "GOCCL_STORE_ADDR": "node1:7000", "GOCCL_STORE": "file:///nfs/x"},
			want: Env{Rank: 0, WorldSize: 2, StoreDir: "/nfs/x", Source: "goccl"},
			ok:   true,
		},
		{name: "GOCCL_STORE without scheme", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE": "h:2379"}, ok: true, err: `GOCCL_STORE="h:2379": want etcd://`},
		{name: "GOCCL_STORE unknown scheme", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE": "redis://h:1"}, ok: true, err: `GOCCL_STORE="redis://h:1": unknown scheme "redis"`},
		{name: "GOCCL_STORE etcd without port", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE": "etcd://h/p"}, ok: true, err: `GOCCL_STORE="etcd://h/p": etcd endpoint "h"`},
		{name: "GOCCL_STORE tcp bad port", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE": "tcp://h:0"}, ok: true, err: `GOCCL_STORE="tcp://h:0"`},
		{name: "GOCCL_STORE relative file", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE": "file://dir"}, ok: true, err: `GOCCL_STORE="file://dir": file:///dir`},
		{
			name: "store served by the launcher",
			env:  vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "2", "GOCCL_STORE_ADDR": "node1:7000", "GOCCL_STORE_SERVED": "Launcher"},
			want: Env{Rank: 0, WorldSize: 2, StoreAddr: "node1:7000", Source: "goccl", Served: true},
			ok:   true,
		},
		{
			name: "store served by rank 0",
			env:  vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "2", "GOCCL_STORE_ADDR": "node1:7000", "GOCCL_STORE_SERVED": "rank0"},
			want: Env{Rank: 0, WorldSize: 2, StoreAddr: "node1:7000", Source: "goccl"},
			ok:   true,
		},
		{name: "bad store server", env: vars{"GOCCL_RANK": "0", "GOCCL_WORLD_SIZE": "1", "GOCCL_STORE_SERVED": "agent"}, ok: true, err: `GOCCL_STORE_SERVED="agent": want rank0 or launcher`},
		{name: "bad master port", env: vars{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "m", "MASTER_PORT": "70000"}, ok: true, err: `MASTER_PORT="70000"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			got, ok, err := fromLookup(lookup)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (err %v)", ok, tt.ok, err)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			// StoreAddrFrom names the variable StoreAddr came from.
			wantFrom := map[bool]string{true: "GOCCL_STORE_ADDR", false: "MASTER_ADDR, MASTER_PORT"}[tt.env["GOCCL_STORE_ADDR"] != ""]
			if got.StoreAddr == "" {
				wantFrom = ""
			}
			if got.StoreAddrFrom != wantFrom {
				t.Errorf("StoreAddrFrom = %q, want %q", got.StoreAddrFrom, wantFrom)
			}
			got.StoreAddrFrom = ""
			if got != tt.want {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestFromEnvProcess(t *testing.T) {
	for _, k := range []string{"GOCCL_RANK", "GOCCL_WORLD_SIZE", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"} {
		t.Setenv(k, "")
	}
	t.Setenv("GOCCL_RANK", "1")
	t.Setenv("GOCCL_WORLD_SIZE", "3")
	env, ok, err := FromEnv()
	if !ok || err != nil || env.Rank != 1 || env.WorldSize != 3 || env.Source != "goccl" {
		t.Fatalf("FromEnv = %+v, %v, %v", env, ok, err)
	}
}
