"""``embodied.checkpoint.migrate``: an older checkpoint in today's form, in one place; each move applies once, where
its old key is and its new one is not, to the actor's entry and to every rank's share of it."""

from __future__ import annotations

import json

import torch

from embodied.checkpoint.migrate import FORMAT_VERSION, KeyMove, migrate, migrate_actor
from embodied.checkpoint.store import MANIFEST_FILE, TRAINER_FILE, load_checkpoint, save_checkpoint


def old_awac_state() -> dict:
    """A trainer state as an AWAC run wrote it before AWAC had its own name: a config that still names ``sac``
    with ``awr_temperature`` set (the field split off into ``awac``), the learner under ``sac``."""
    return {"iteration": 3, "config": {"algorithm": {"name": "sac", "awr_temperature": 1.0}},
            "actor": {"policy": {"w": torch.ones(2)}, "version": 3,
                      "sac": {"actor_optimizer": {"state": {}}, "critics": {}},
                      "sac_counters": {"received": 5, "owed": 0.5},
                      "rank_shares": [{"sac_generator": torch.zeros(3)}, {"sac_generator": torch.ones(3)}]}}


def test_an_older_checkpoint_is_brought_to_today_s_keys_in_its_entry_and_every_rank_share():
    actor = migrate(old_awac_state(), version=2)["actor"]
    assert set(actor) == {"policy", "version", "awac", "awac_counters", "rank_shares"}
    assert set(actor["awac"]) == {"policy_optimizer", "critics", "target_encoder"}  # renamed, and the one added
    assert actor["awac"]["target_encoder"] == {} and actor["awac_counters"] == {"received": 5, "owed": 0.5}
    assert [set(share) for share in actor["rank_shares"]] == [{"awac_generator"}] * 2
    assert torch.equal(actor["rank_shares"][1]["awac_generator"], torch.ones(3))


def test_today_s_format_and_moved_keys_are_left_as_they_are():
    actor = migrate(old_awac_state(), version=FORMAT_VERSION)["actor"]  # today's format: nothing to do
    assert set(actor) == set(old_awac_state()["actor"]) and set(actor["sac"]) == {"actor_optimizer", "critics"}
    entry = {"sac": {"actor_optimizer": 1, "policy_optimizer": 2}}
    migrate_actor(entry, (KeyMove("sac.actor_optimizer", "sac.policy_optimizer", 3, "test"),))
    assert entry == {"sac": {"actor_optimizer": 1, "policy_optimizer": 2}}  # the new key wins: nothing overwritten
    again = migrate(migrate(old_awac_state(), 2), 2)
    assert set(again["actor"]) == {"policy", "version", "awac", "awac_counters", "rank_shares"}  # idempotent


def test_a_state_dict_prefix_moves_and_a_move_older_than_the_checkpoint_is_skipped():
    entry = {"policy": {"actor.0.weight": 1, "actor.0.bias": 2, "recorded": 3}}
    move = KeyMove("policy:actor.", "policy:noise_policy.", 3, "test")
    assert migrate_actor(dict(entry, policy=dict(entry["policy"])), (move,), version=3) == entry  # format 3 has it
    assert migrate_actor(entry, (move,), version=2)["policy"] == {"noise_policy.0.weight": 1,
                                                                    "noise_policy.0.bias": 2, "recorded": 3}


def test_a_dsrl_checkpoint_of_before_loads_its_noise_policy_under_today_s_names(tmp_path):
    folder = tmp_path / "iter_000001"
    state = {"iteration": 1, "config": {"algorithm": {"name": "dsrl"}},
             "actor": {"policy": {"actor.mean.weight": torch.ones(2)}, "version": 1, "sac": {"critics": {}}}}
    save_checkpoint(folder, state)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert manifest["format_version"] == FORMAT_VERSION == 4  # every manifest says its format
    loaded = load_checkpoint(folder)  # a folder of today's format: read as written
    assert "actor.mean.weight" in loaded["actor"]["policy"]
    (folder / MANIFEST_FILE).unlink()  # a folder without a manifest is format 1
    loaded = load_checkpoint(folder / TRAINER_FILE)
    assert set(loaded["actor"]["policy"]) == {"noise_policy.mean.weight"} and "dsrl" in loaded["actor"]


def test_a_checkpoint_whose_config_names_no_known_algorithm_is_left_to_its_worker():
    state = {"config": {"algorithm": {"name": "no_such_algorithm"}}, "actor": {"sac": {"actor_optimizer": 1}}}
    assert migrate(state, 1)["actor"] == {"sac": {"actor_optimizer": 1}}


def test_format_3_sac_family_actors_find_their_encoder_under_its_new_name():
    """Format 4: SAC's actor holds the policy's encoder as ``encoder.`` (the MLP's states were ``states.``, the CNN's
    image encoder ``features.``, DSRL's noise policy's ``noise_policy.states.``), in the policy and its average."""
    def state(name: str, policy: dict) -> dict:
        return {"config": {"algorithm": {"name": name}}, "actor": {"policy": policy, "live_policy": dict(policy)}}

    mlp = migrate(state("sac", {"states.state_mean": 1, "trunk.0.weight": 2}), 3)["actor"]
    assert mlp["policy"] == mlp["live_policy"] == {"encoder.state_mean": 1, "trunk.0.weight": 2}
    cnn = migrate(state("crossq", {"features.main.0.weight": 1, "mean_head.bias": 2}), 3)["actor"]
    assert cnn["policy"] == {"encoder.main.0.weight": 1, "mean_head.bias": 2}
    dsrl = migrate(state("dsrl", {"actor.states.state_var": 1, "actor.trunk.0.bias": 2}), 2)["actor"]
    assert dsrl["policy"] == {"noise_policy.encoder.state_var": 1, "noise_policy.trunk.0.bias": 2}
    today = migrate(state("sac", {"states.x": 1}), FORMAT_VERSION)["actor"]  # format 4 is read as written
    assert today["policy"] == {"states.x": 1}
