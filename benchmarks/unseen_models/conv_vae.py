"""A convolutional variational autoencoder (not in the zoo): a strided Conv2d encoder to a 32-d latent
(mean and log-variance), the reparameterisation trick, and a ConvTranspose2d decoder back to 3x32x32;
loss: reconstruction MSE + KL divergence."""
import torch
import torch.nn.functional as F
from torch import nn

LATENT = 32


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 32, 4, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 4, 2, 1), nn.ReLU(),
                                 nn.Conv2d(64, 128, 4, 2, 1), nn.ReLU(), nn.Flatten())
        self.mu = nn.Linear(128 * 16, LATENT)
        self.logvar = nn.Linear(128 * 16, LATENT)
        self.dec_in = nn.Linear(LATENT, 128 * 16)
        self.dec = nn.Sequential(nn.ConvTranspose2d(128, 64, 4, 2, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(32, 3, 4, 2, 1), nn.Sigmoid())

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(self.dec_in(z).view(-1, 128, 4, 4)), mu, logvar


def build_model() -> nn.Module:
    return VAE()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.rand(batch_size, 3, 32, 32)


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.rand(batch_size, 3, 32, 32)


def loss_fn(outputs, targets):
    recon, mu, logvar = outputs
    kl = -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())
    return F.mse_loss(recon, targets) + kl
